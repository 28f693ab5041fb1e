"""The subscriber's durable position: the replay id of the last event that is safely in the landing zone.

One small JSON file per topic, replaced atomically (:func:`write_durably`: write, fsync, rename, fsync the folder).
It is written only after the landing file holding that event has been renamed into the landing zone, so after a
crash the stream resumes at or before the first event that did not land: events may land twice (dedup absorbs
them), never zero times.

The replay id is opaque: it is kept as the exact bytes the Pub/Sub API gave (hex) and sent back unchanged to resume;
nothing here orders or interprets it. ``replay_int`` is only a display form, the CometD ``replayId`` long, present
when the id is 8 bytes (Salesforce's form today).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

from cdc_subscriber.proto import replay_as_long


def _slug(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", topic).strip("_") or "topic"


def write_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name("." + path.name)
    with temp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PositionStore:
    def __init__(self, state_dir: Path, topic: str):
        self.path = Path(state_dir) / f"position-{_slug(topic)}.json"
        self.topic = topic

    def load(self) -> bytes | None:
        if not self.path.exists():
            return None
        saved = json.loads(self.path.read_text())
        return bytes.fromhex(saved["replay_id"])

    def save(self, replay_id: bytes) -> None:
        body = {"topic": self.topic, "replay_id": replay_id.hex(), "replay_int": replay_as_long(replay_id),
                "saved_at": dt.datetime.now(dt.UTC).isoformat()}
        write_durably(self.path, json.dumps(body))
