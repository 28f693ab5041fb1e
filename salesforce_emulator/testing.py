"""Small helpers for reading what the emulator landed (used by tests and the demo; no test framework needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_landed_events(landing_dir: Path) -> list[dict[str, Any]]:
    """Every event line in the visible ``*.jsonl`` files under ``landing_dir``, files in name order. Lines end at
    LF only: ``str.splitlines()`` would also cut at U+2028 and U+0085, which JSON strings may hold raw."""
    events = []
    for path in sorted(Path(landing_dir).rglob("*.jsonl")):
        if path.name.startswith(("_", ".")):
            continue
        events.extend(json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line)
    return events


def header(event: dict[str, Any]) -> dict[str, Any]:
    return event["data"]["payload"]["ChangeEventHeader"]


def body(event: dict[str, Any]) -> dict[str, Any]:
    """The event's field values (everything in the payload except the header)."""
    return {k: v for k, v in event["data"]["payload"].items() if k != "ChangeEventHeader"}


def event_order(event: dict[str, Any]) -> tuple[int, int, int, int]:
    """The replication order (docs/design/contract.md §4): commitTimestamp, commitNumber, sequenceNumber, replayId."""
    h = header(event)
    return h["commitTimestamp"], h["commitNumber"], h["sequenceNumber"], event["data"]["event"]["replayId"]
