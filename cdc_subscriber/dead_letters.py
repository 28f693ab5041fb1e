"""Dead letters: change events the subscriber cannot decode never stop a topic.

An event ``EventDecoder.decode`` cannot handle (an unexpected Avro shape, a schema ``GetSchema`` cannot serve,
corrupt bytes, a bug of ours) would otherwise fail the stream, which resumes from the same position and fails on
the same event forever. Instead it becomes a *dead letter*, and the stream goes on:

1. **What can be salvaged** (:func:`salvage`). ``ChangeEventHeader`` is the first field of every change event
   schema and Avro writes a record's fields in order, so the header alone can often be read with a schema cut to
   that one field, even when the body cannot. Then, in the order of what is known:

   - header readable, records named: one ``GAP_<type>`` line (``markers.gap_marker``) for the event's record ids,
     with its transaction key, sequence number and commit time: each record becomes dirty and is reconciled by id;
   - header readable but no usable record ids (a wildcard, none, an overflow), or the header unreadable while the
     entity is known (from the schema's name, ``AccountChangeEvent``, or the channel, ``/data/AccountChangeEvent``):
     a ``GAP_OVERFLOW`` for that entity, which is resynced;
   - the schema cannot be fetched on ``/data/ChangeEvents``: nothing is readable, not even the entity, so every
     replicated entity of the topic is resynced.

2. **Exactly-once, with the position rule.** The dead-letter record is saved durably first (:class:`DeadLetterStore`,
   write/fsync/rename), then the salvage lines are written to the open landing file with the event's replay id; the
   position passes the event only once that file is renamed into the zone, like any event's. A crash in between
   re-delivers the event: the record is kept once per replay id (the count is of unique replay ids), and re-landed
   lines are counted duplicates (a gap keeps the original event identity; overflow markers use the transaction key
   ``dead-letter-<replay id hex>``).

3. **Seen and acknowledged.** Each topic keeps ``dead_letters-<topic>.jsonl`` in the state folder: replay id (hex),
   schema id, the raw payload (base64), the reason, what was landed instead, and when. The stream status counts
   them (``status.py``); Dagster's check ``subscriber_no_dead_letters`` fails while any is not acknowledged.
   ``python -m cdc_subscriber dead-letters --ack`` acknowledges every one listed (``dead_letters_acknowledged.json``)
   once an operator has looked at them: the replicas were repaired by the gaps and resyncs either way, but a dead
   letter usually means a bug to fix or a schema change to understand.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import io
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import grpc

from cdc_subscriber.markers import gap_marker, overflow_marker
from cdc_subscriber.position import _slug, state_file
from cdc_subscriber.proto import replay_as_long
from resources.storage import Folder

log = logging.getLogger(__name__)

ORIGIN = "cdc_subscriber/dead-letter"
ACKNOWLEDGED_FILE = "dead_letters_acknowledged.json"
HEADER_FIELD = "ChangeEventHeader"
SCHEMA_UNAVAILABLE = {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT}
_RECORD_ID = re.compile(r"^[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?$")
_HEADER_TYPES = {"entityName": str, "recordIds": list, "changeType": str, "transactionKey": str,
                 "sequenceNumber": int, "commitTimestamp": int, "commitNumber": int}


def schema_unavailable(exc: grpc.RpcError) -> bool:
    """``GetSchema`` said this schema id does not exist (or is malformed): asking again cannot help. Any other
    failure (unavailable, session expired) is the stream's, retried with backoff, not the event's."""
    return exc.code() in SCHEMA_UNAVAILABLE  # type: ignore[attr-defined]


def entity_of(name: str) -> str | None:
    """The sObject of a schema or channel name: ``AccountChangeEvent`` / ``/data/AccountChangeEvent`` -> Account,
    ``Invoice__ChangeEvent`` -> Invoice__c; None for ``/data/ChangeEvents`` or anything else."""
    match = re.fullmatch(r"([A-Za-z]\w*?)(__)?ChangeEvent", name.removeprefix("/data/"))
    if match is None:
        return None
    return match.group(1) + ("__c" if match.group(2) else "")


# -- reading what can be read ---------------------------------------------------------------------------------------
def read_header(schema_text: str | None, payload: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the ChangeEventHeader, "") when the header decodes on its own, else (None, why not)."""
    if schema_text is None:
        return None, "no schema"
    try:
        schema = json.loads(schema_text)
        first = schema["fields"][0]
        if first["name"] != HEADER_FIELD:
            return None, f"the schema's first field is {first['name']}, not {HEADER_FIELD}"
        header_only = {"type": "record", "name": schema["name"], "namespace": schema.get("namespace", ""),
                       "fields": [first]}
        header = fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(header_only), None)[HEADER_FIELD]
    except Exception as exc:  # whatever corrupt bytes or an odd schema raise: the reason is kept, the event resyncs
        return None, f"{type(exc).__name__}: {exc}"
    wrong = [name for name, kind in _HEADER_TYPES.items() if not isinstance(header.get(name), kind)]
    if wrong:
        return None, f"header fields missing or of the wrong type: {', '.join(wrong)}"
    return dict(header), ""


def _names_records(header: dict[str, Any]) -> bool:
    ids = header["recordIds"]
    return (bool(ids) and header["changeType"] != "GAP_OVERFLOW"
            and all(isinstance(i, str) and _RECORD_ID.match(i) for i in ids))


def _schema_name(schema_text: str | None) -> str:
    """The record name of a schema's JSON (``AccountChangeEvent``); "" when there is none to read."""
    try:
        schema = json.loads(schema_text) if schema_text is not None else {}
    except json.JSONDecodeError:
        return ""
    name = schema.get("name") if isinstance(schema, dict) else None
    return name if isinstance(name, str) else ""


@dataclass(frozen=True)
class Salvage:
    """What lands instead of an event that does not decode: CometD lines, their commit time and transaction key
    (for the landing file), and a sentence saying what they do."""

    lines: list[dict[str, Any]]
    commit_ts: int
    transaction_key: str
    entity: str | None
    action: str


def salvage(*, replay_id: bytes, schema_id: str, payload: bytes, schema_text: str | None, channel: str,
            entities: tuple[str, ...], now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> Salvage:
    """Gap lines for the records a readable header names, else overflow markers (see the module docstring).
    ``schema_text`` is None when the schema could not be fetched."""
    replay_long = replay_as_long(replay_id)
    header, _ = read_header(schema_text, payload)
    if header is not None and _names_records(header):
        line = gap_marker(header, channel, schema_id, replay_long, ORIGIN)
        records = header["recordIds"]
        named = ", ".join(records[:5]) + (", ..." if len(records) > 5 else "")
        return Salvage([line], header["commitTimestamp"], header["transactionKey"], header["entityName"],
                       f"landed {line['data']['payload'][HEADER_FIELD]['changeType']} for {len(records)} "
                       f"{header['entityName']} record(s) ({named}): they are reconciled by id")
    if header is not None:
        entity: str | None = header["entityName"]
    else:
        entity = entity_of(_schema_name(schema_text)) or entity_of(channel)
    targets = (entity,) if entity else entities
    key = f"dead-letter-{replay_id.hex()}"
    commit_ts = header["commitTimestamp"] if header is not None else now_ms()
    lines = [overflow_marker(name, key, sequence, commit_ts, channel, replay_long, ORIGIN, schema_id)
             for sequence, name in enumerate(targets, start=1)]
    action = (f"landed GAP_OVERFLOW for {', '.join(targets)}: resynced from the org" if targets else
              "nothing could be marked (no entity known and no replicated objects configured): run a resync of "
              "every replica by hand")
    return Salvage(lines, commit_ts, key, entity, action)


# -- the record operators and Dagster read ------------------------------------------------------------------------
@dataclass(frozen=True)
class DeadLetter:
    topic: str
    replay_id: str  # hex of the opaque bytes
    schema_id: str
    payload: str  # base64 of the raw Avro payload
    reason: str
    action: str
    entity: str | None = None
    recorded_at: str = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())

    @property
    def key(self) -> str:
        return f"{self.topic} {self.replay_id}"

    @classmethod
    def of(cls, topic: str, replay_id: bytes, schema_id: str, payload: bytes, reason: str,
           found: Salvage) -> DeadLetter:
        return cls(topic, replay_id.hex(), schema_id, base64.b64encode(payload).decode(), reason, found.action,
                   found.entity)


class DeadLetterStore:
    """One topic's dead letters, one JSON line each, unique by replay id, replaced durably on every addition (they
    are rare: rewriting the file is cheap, and a crash leaves the old or the new list, never half a line)."""

    def __init__(self, state_dir: str | Path, topic: str):
        self.folder, self.name = Folder(state_dir), f"dead_letters-{_slug(topic)}.jsonl"
        self.path = state_file(state_dir, self.name)

    def read(self) -> list[DeadLetter]:
        return _read(self.folder, self.name)

    def record(self, letter: DeadLetter) -> bool:
        """Save ``letter`` durably; False when its replay id was recorded before (re-delivered after a crash)."""
        letters = self.read()
        if any(saved.replay_id == letter.replay_id for saved in letters):
            return False
        self.folder.write_atomically(self.name, "".join(json.dumps(dataclasses.asdict(x)) + "\n"
                                                        for x in [*letters, letter]))
        return True


def _read(folder: Folder, name: str) -> list[DeadLetter]:
    text = folder.read_text(name)
    return [] if text is None else [DeadLetter(**json.loads(line)) for line in text.splitlines() if line]


def read_dead_letters(state_dir: str | Path) -> list[DeadLetter]:
    """Every topic's dead letters in a state folder (a local path or an object-store URI), oldest first."""
    folder = Folder(state_dir)
    letters = [x for name in folder.names(prefix="dead_letters-", suffix=".jsonl") for x in _read(folder, name)]
    return sorted(letters, key=lambda x: x.recorded_at)


def _acknowledged(state_dir: str | Path) -> set[str]:
    text = Folder(state_dir).read_text(ACKNOWLEDGED_FILE)
    return set(json.loads(text)["acknowledged"]) if text is not None else set()


def unacknowledged(state_dir: str | Path) -> list[DeadLetter]:
    done = _acknowledged(state_dir)
    return [x for x in read_dead_letters(state_dir) if x.key not in done]


def acknowledge(state_dir: str | Path) -> list[DeadLetter]:
    """Acknowledge every dead letter recorded so far; returns the ones newly acknowledged."""
    fresh = unacknowledged(state_dir)
    done = sorted(_acknowledged(state_dir) | {x.key for x in fresh})
    Folder(state_dir).write_atomically(ACKNOWLEDGED_FILE, json.dumps({"acknowledged": done}, indent=1))
    return fresh
