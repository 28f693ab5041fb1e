"""The org of the polling tests: the real HTTPS emulator with CDC disabled (every object is polled)."""

from __future__ import annotations

import pytest

from salesforce_emulator import Emulator


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", cdc_objects=[]) as emu:
        yield emu
