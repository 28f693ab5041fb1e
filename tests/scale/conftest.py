"""Tests at the scale of a large org (hundreds of objects): minutes long, run by `make test-scale` (`pytest -m
scale tests/scale`, which CI runs too); a plain `pytest` run skips them and runs their small variants."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "scale" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="hundreds of objects (minutes on 2 cores): run `make test-scale`")
    for item in items:
        if item.get_closest_marker("scale") is not None:
            item.add_marker(skip)
