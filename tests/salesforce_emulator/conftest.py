"""Fixtures for the emulator tests: a running emulator per test and a simple-salesforce client.

``landed_events`` is exposed as a fixture (a function) so test modules never import this conftest by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.testing import read_landed_events


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", roll_seconds=3600) as emu:
        yield emu


@pytest.fixture
def sf(emulator: Emulator) -> Salesforce:
    return simple_salesforce_client(emulator)


def landed_events(emu: Emulator) -> list[dict[str, Any]]:
    """Every event line visible in the landing zone, in file-name order (flushes pending events first)."""
    assert emu.landing_dir is not None
    emu.flush_cdc()
    assert not list(emu.landing_dir.rglob("_*")), "no invisible file may remain after a flush"
    return read_landed_events(emu.landing_dir)


@pytest.fixture(name="landed_events")
def landed_events_fixture():
    return landed_events
