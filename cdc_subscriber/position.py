"""The subscriber's durable position: the replay id of the last event that is safely in the landing zone.

One small JSON file per topic, replaced atomically (write, fsync, rename, fsync the folder). It is written only
after the landing file holding that event has been renamed into the landing zone, so after a crash the stream
resumes at or before the first event that did not land: events may land twice (dedup absorbs them), never zero
times. The replay id is kept as the opaque bytes the Pub/Sub API gave (hex), plus its integer form for humans.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path


def _slug(topic: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", topic).strip("_") or "topic"


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name("." + self.path.name)
        body = {"topic": self.topic, "replay_id": replay_id.hex(), "replay_int": int.from_bytes(replay_id, "big"),
                "saved_at": dt.datetime.now(dt.UTC).isoformat()}
        with temp.open("w") as handle:
            handle.write(json.dumps(body))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
