"""Google Datastream's Salesforce events, from the org's truth, for a landing zone of mixed formats.

Datastream's Salesforce source polls the org and writes one JSON line per record image (generic metadata, Salesforce
`source_metadata`, the whole row as `payload`; see spark_ops/datastream.py for the shape and what it means):

- `datastream_line(obj, row, ...)`: one event for a stored row, as Datastream writes it: compound components flat
  (`BillingCity`), `IsDeleted` and `SystemModstamp` included, formula fields left out, timestamps ISO-8601 UTC;
- `backfill_lines(store, objects)`: `salesforce-backfill` events of every record (deleted ones too), each at its
  SystemModstamp, read now;
- `MixedLanding`: a store listener that routes each committed transaction to CometD lines (`cometd`, built by
  the CDC publisher's own `build_events`) or to Datastream `salesforce-cdc` images of the records it touched
  (`datastream`), or to both (the same change landed twice in two shapes), by seeded chance. The lines are
  kept for the caller to land in files of its choosing (order, duplicates, late files).

A record purged from the recycle bin (hard delete) has no row left to image: like CometD, nothing is sent.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from typing import Any

from salesforce_emulator.cdc import build_events, cometd_line
from salesforce_emulator.changes import CommittedTransaction
from salesforce_emulator.faults import FaultConfig
from salesforce_emulator.schema import SObject
from salesforce_emulator.store import Store
from salesforce_emulator.values import to_event

STREAM = "projects/emulator/locations/local/streams/salesforce"
DELETED = "IsDeleted"
MODSTAMP = "SystemModstamp"


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _millis(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def payload(obj: SObject, row: dict[str, Any]) -> dict[str, Any]:
    """The whole row as Datastream sends it: every stored field flat, formulas left out."""
    return {f.name: to_event(f.type, row.get(f.name)) for f in obj.fields if f.stored}


def datastream_event(
    obj: SObject, row: dict[str, Any], *, read_method: str, change_type: str, read_ms: int, event_id: str
) -> dict[str, Any]:
    body = payload(obj, row)
    deleted = bool(body.get(DELETED))
    source_ms = _millis(body[MODSTAMP])
    return {
        "stream_name": STREAM,
        "read_method": f"salesforce-{read_method}",
        "object": obj.name,
        "schema_key": f"{obj.name}-schema",
        "uuid": event_id,
        "read_timestamp": _iso(read_ms),
        "source_timestamp": body[MODSTAMP],
        "sort_keys": [source_ms, row["Id"]],
        "source_metadata": {
            "object_name": obj.name,
            "change_type": "DELETE" if deleted else change_type,
            "is_deleted": deleted,
        },
        "payload": body,
    }


def datastream_line(
    obj: SObject, row: dict[str, Any], *, read_method: str, change_type: str, read_ms: int, event_id: str
) -> str:
    event = datastream_event(
        obj, row, read_method=read_method, change_type=change_type, read_ms=read_ms, event_id=event_id
    )
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def backfill_lines(store: Store, objects: list[str], rng: random.Random, read_ms: int | None = None) -> list[str]:
    """A Datastream backfill of `objects`: one `salesforce-backfill` image per record, deleted ones included."""
    read_ms = read_ms or int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    lines = []
    for name in objects:
        obj = store.resolve(name)
        for row in store.select(f'SELECT * FROM "{obj.name}" ORDER BY Id'):
            lines.append(
                datastream_line(
                    obj,
                    row,
                    read_method="backfill",
                    change_type="INSERT",
                    read_ms=read_ms,
                    event_id=str(uuid.UUID(int=rng.getrandbits(128))),
                )
            )
    return lines


class MixedLanding:
    """Store listener: each transaction becomes CometD lines, Datastream images, or both (see module doc)."""

    def __init__(
        self, store: Store, objects: list[str], *, datastream_share: float = 0.5, both_share: float = 0.1, seed: int = 0
    ):
        self.store = store
        self.objects = set(objects)
        self.datastream_share, self.both_share = datastream_share, both_share
        self.rng = random.Random(seed)
        self.faults = FaultConfig()
        self.cometd: list[str] = []
        self.datastream: list[str] = []
        self.read_ms = 0

    def __call__(self, txn: CommittedTransaction) -> None:
        draw = self.rng.random()
        both = draw < self.both_share
        if both or draw >= 1 - self.datastream_share:
            self.datastream += self._images(txn)
        if both or draw < 1 - self.datastream_share:
            events = build_events(txn, lambda entity: entity in self.objects, self.faults, self.rng)
            self.cometd += [cometd_line(e) for e in events]

    def _images(self, txn: CommittedTransaction) -> list[str]:
        """The state after `txn` of every record it touched (read inside the commit: nothing newer exists yet)."""
        # Datastream reads after the commit; its read time is at least the commit time, and moves forward.
        self.read_ms = max(self.read_ms + 1, txn.commit_ts)
        lines, seen = [], set()
        for change in txn.changes:
            if change.entity not in self.objects:
                continue
            obj = self.store.resolve(change.entity)
            for record_id in change.record_ids:
                row = self.store.get_row(obj.name, record_id)
                if row is None or (obj.name, record_id) in seen:  # purged: no row left to read
                    continue
                seen.add((obj.name, record_id))
                kind = "INSERT" if change.change_type == "CREATE" else "UPDATE"
                lines.append(
                    datastream_line(
                        obj,
                        row,
                        read_method="cdc",
                        change_type=kind,
                        read_ms=self.read_ms,
                        event_id=str(uuid.UUID(int=self.rng.getrandbits(128))),
                    )
                )
        return lines
