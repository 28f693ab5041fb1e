"""The CDC publisher: a store listener that writes each committed transaction's events to the landing zone
and/or appends them to the event bus the Pub/Sub API server reads (``event_log.py``): the same events, built once,
landed as the Streaming API (CometD) delivers them and kept whole for the Pub/Sub API (``cdc.cometd_line``).

It runs inside the store's commit (the store lock is held), so files receive events in commit order. CDC is
enabled per object (``None`` means every object); changes to other objects still take part in sequence numbering
but publish nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from salesforce_emulator.cdc import build_events, cometd_line, event_line
from salesforce_emulator.changes import CommittedTransaction
from salesforce_emulator.event_log import EventLog
from salesforce_emulator.faults import FaultConfig
from salesforce_emulator.landing import LandingWriter
from salesforce_emulator.schema import get_object


class CdcPublisher:
    def __init__(
        self,
        landing_dir: Path | None,
        cdc_objects: list[str] | None,
        faults: FaultConfig,
        *,
        max_bytes: int = 8 << 20,
        max_age_seconds: float = 2.0,
        events: EventLog | None = None,
        hidden: Callable[[str], frozenset[str]] = lambda entity: frozenset(),
    ):
        self.hidden = hidden  # the fields of an object the subscriber cannot read (left out of its events)
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.set_objects(cdc_objects)
        self.writer = LandingWriter(
            landing_dir if landing_dir is not None else Path(),
            faults,
            self.rng,
            max_bytes=max_bytes,
            max_age_seconds=max_age_seconds,
            enabled=landing_dir is not None,
        )
        self.events = events
        self.counts: Counter[str] = Counter()

    def set_objects(self, cdc_objects: list[str] | None) -> None:
        if cdc_objects is None:
            self.enabled: set[str] | None = None
            return
        unknown = [name for name in cdc_objects if get_object(name) is None]
        if unknown:
            raise ValueError(f"CDC cannot be enabled for unknown objects: {', '.join(unknown)}")
        self.enabled = {get_object(name).name for name in cdc_objects}  # type: ignore[union-attr]

    def is_enabled(self, entity: str) -> bool:
        obj = get_object(entity)
        return (obj is None or obj.cdc) and (self.enabled is None or entity in self.enabled)

    def set_faults(self, faults: FaultConfig) -> None:
        with self.writer.lock:
            self.faults = faults
            self.writer.faults = faults
            if faults.seed is not None:
                self.rng.seed(faults.seed)

    def __call__(self, txn: CommittedTransaction) -> None:
        events = build_events(txn, self.is_enabled, self.faults, self.rng, self.hidden)
        self.counts["events"] += len(events)
        self.counts["transactions"] += 1 if events else 0
        if self.writer.enabled:
            self.writer.write([cometd_line(e) for e in events], txn.commit_ts)
        if self.events is not None:
            self.events.append([event_line(e) for e in events], txn.commit_ts)
