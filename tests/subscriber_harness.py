"""Drives the CDC subscriber in tests: a subscriber in a thread, its config against an emulator, landed events.

A plain module (like harness.py) so test modules import it by name; conftest modules cannot be.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from cdc_subscriber.service import Subscriber, SubscriberConfig
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.cdc import PUBSUB_ONLY_HEADER_FIELDS


class RunningSubscriber:
    def __init__(self, subscriber: Subscriber):
        self.subscriber = subscriber
        self.result: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result = self.subscriber.run()

    def wait_for(self, replay_id: int | bytes, timeout: float = 60.0) -> None:
        """Until the durable position reaches ``replay_id`` (everything up to it is landed): an int is the
        emulator's default 8-byte id, compared as a number; bytes (opaque ids) must be the position exactly."""
        deadline = time.monotonic() + timeout
        while not self._reached(replay_id):
            assert self.thread.is_alive(), f"subscriber stopped: {self.result}"
            saved = self.subscriber._saved
            assert time.monotonic() < deadline, f"position {saved and saved.hex()} never reached {replay_id!r}"
            time.sleep(0.05)

    def _reached(self, replay_id: int | bytes) -> bool:
        saved = self.subscriber._saved
        if isinstance(replay_id, bytes):
            return saved == replay_id
        return saved is not None and len(saved) == 8 and int.from_bytes(saved, "big") >= replay_id

    def stop(self) -> str | None:
        self.subscriber.stop()
        self.thread.join(timeout=30)
        return self.result


def subscriber_config(emu: Emulator, root: Path, **overrides: Any) -> SubscriberConfig:
    options: dict[str, Any] = {
        "landing_dir": root / "landing",
        "state_dir": root / "state",
        "endpoint": emu.pubsub_address,
        "ca_file": emu.ca_file,
        "initial_replay": "EARLIEST",
        "roll_seconds": 0.2,
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        "entities": ("Account", "Contact", "Opportunity", "Lead", "Case"),
    }
    return SubscriberConfig(**(options | overrides))


def resource(emu: Emulator, **overrides: Any) -> SalesforceResource:
    return SalesforceResource(
        **({"instance_url": emu.instance_url, "access_token": emu.token, "ca_bundle": emu.ca_file} | overrides)
    )


def as_cometd(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events as the Streaming API (CometD) delivers them, as the emulator's own writer lands them: the subscriber
    keeps the Pub/Sub API's `nulledFields` and `diffFields`, which a CometD header never has."""
    out = []
    for event in events:
        payload = event["data"]["payload"]
        header = {k: v for k, v in payload["ChangeEventHeader"].items() if k not in PUBSUB_ONLY_HEADER_FIELDS}
        out.append({**event, "data": {**event["data"], "payload": {**payload, "ChangeEventHeader": header}}})
    return out


def landed(root: Path) -> list[dict[str, Any]]:
    """Every visible event line under ``root``, in replay order (then file name)."""
    events = []
    for path in sorted(p for p in root.rglob("*.jsonl") if not any(x.startswith("_") for x in p.parts[-5:])):
        # LF only: str.splitlines() would also cut at U+2028, which JSON strings hold raw (free text has it)
        events += [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]
    return sorted(events, key=lambda e: e["data"]["event"]["replayId"] or 0)
