"""Fixtures for the emulator tests: a running emulator per test, a simple-salesforce client, landed events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client


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
    events = []
    for path in sorted(emu.landing_dir.rglob("*.jsonl")):
        assert not path.name.startswith("_")
        events.extend(json.loads(line) for line in path.read_text().splitlines())
    return events


def header(event: dict[str, Any]) -> dict[str, Any]:
    return event["data"]["payload"]["ChangeEventHeader"]


def body(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event["data"]["payload"].items() if k != "ChangeEventHeader"}
