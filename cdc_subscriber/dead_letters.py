"""Dead letters: change events the subscriber cannot decode, or whose header cannot be landed, never stop a topic.

An event ``EventDecoder.decode`` cannot handle (an unexpected Avro shape, a schema ``GetSchema`` cannot serve,
corrupt bytes, a bug of ours), or whose header decodes but cannot be landed (``header.py``: a ``commitTimestamp``
in nanoseconds, an ``entityName`` that is not an API name), would otherwise fail the stream, which resumes from the
same position and fails on the same event forever. Instead it becomes a *dead letter*, and the stream goes on:

1. **What can be salvaged** (:func:`salvage`). ``ChangeEventHeader`` is the first field of every change event
   schema and Avro writes a record's fields in order, so the header alone can often be read with a schema cut to
   that one field, even when the body cannot. Then, in the order of what is known:

   - header readable, records named: one ``GAP_<type>`` line (``markers.gap_marker``) for the event's record ids,
     with its transaction key, sequence number and commit time (the time the subscriber received it when the
     header's is not plausible): each record becomes dirty and is reconciled by id;
   - header readable but no usable record ids (a wildcard, none, an overflow), or the header unreadable (or its
     ``entityName`` not an API name) while the entity is known from the schema's name (``AccountChangeEvent``) or
     the channel (``/data/AccountChangeEvent``): a ``GAP_OVERFLOW`` for that entity, which is resynced;
   - the schema cannot be fetched on ``/data/ChangeEvents``: nothing is readable, not even the entity, so every
     replicated entity of the topic is resynced.

2. **Exactly-once, with the position rule.** The dead-letter record is saved durably first (:class:`DeadLetterStore`,
   write/fsync/rename), then the salvage lines are written to the open landing file with the event's replay id; the
   position passes the event only once that file is renamed into the zone, like any event's. A crash in between
   re-delivers the event: the record is kept once per replay id (the count is of unique replay ids), and re-landed
   lines are counted duplicates (a gap keeps the original event identity; overflow markers use the transaction key
   ``dead-letter-<replay id hex>``).

3. **Seen and acknowledged.** Each topic keeps a folder ``dead_letters-<topic>/`` in the state folder with one file
   per letter, ``<replay id hex>.json``: replay id, schema id, the raw payload (base64), the reason, what was landed
   instead, and when. A letter is one new file (never a rewrite of the others), and a topic keeps at most
   ``MAX_LETTERS`` letters and ``MAX_BYTES`` bytes: beyond either, a letter is counted in ``_dropped.json`` (how
   many, and the last one's replay id and reason) instead of kept. Reading never fails on a file that is not a
   letter (a partial copy, a hand edit): it is skipped, logged and listed, and the check below fails naming it.
   The stream status counts letters (``status.py``); Dagster's check ``subscriber_no_dead_letters`` fails while
   any (kept or dropped) is not acknowledged. ``python -m cdc_subscriber dead-letters --ack`` acknowledges every
   one so far (``dead_letters_acknowledged.json``) once an operator has looked at them: the replicas were
   repaired by the gaps and resyncs either way, but a dead letter usually means a bug to fix or a schema change to
   understand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import fastavro
import grpc

from cdc_subscriber.header import FIELD_TYPES, header_problems
from cdc_subscriber.position import state_file, topic_slug
from cdc_subscriber.proto import replay_as_long
from resources.storage import Folder, join
from shared.markers import gap_marker, overflow_marker
from shared.names import is_api_name, is_record_id
from shared.subscriber_state import (
    DROPPED_FILE,
    FOLDER_PREFIX,
    DeadLetter,
    is_letter_file,
    read_dropped,
    read_letters,
)

log = logging.getLogger(__name__)

ORIGIN = "cdc_subscriber/dead-letter"
MAX_LETTERS = 1000  # per topic: a stream that dead-letters this many events has one cause to find, not 1,000
MAX_BYTES = 16 << 20  # per topic: what the status sensor reads every 30 s stays small (an event is up to 1 MB)
HEADER_FIELD = "ChangeEventHeader"
SCHEMA_UNAVAILABLE = {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT}


def schema_unavailable(exc: grpc.RpcError) -> bool:
    """``GetSchema`` said this schema id does not exist (or is malformed): asking again cannot help. Any other
    failure (unavailable, session expired) is the stream's, retried with backoff, not the event's."""
    return exc.code() in SCHEMA_UNAVAILABLE


def entity_of(name: str) -> str | None:
    """The sObject of a schema or channel name: ``AccountChangeEvent`` / ``/data/AccountChangeEvent`` -> Account,
    ``Invoice__ChangeEvent`` -> Invoice__c; None for ``/data/ChangeEvents`` or anything else."""
    match = re.fullmatch(r"([A-Za-z]\w*?)(__)?ChangeEvent", name.removeprefix("/data/"))
    if match is None:
        return None
    entity = match.group(1) + ("__c" if match.group(2) else "")
    return entity if is_api_name(entity) else None


# -- reading what can be read ---------------------------------------------------------------------------------------
def read_header(schema_text: str | None, payload: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the ChangeEventHeader, "") when the header decodes on its own with the fields of its types, else (None,
    why not). Its values may still be implausible: ``header.header_problems`` says."""
    if schema_text is None:
        return None, "no schema"
    try:
        schema = json.loads(schema_text)
        first = schema["fields"][0]
        if first["name"] != HEADER_FIELD:
            return None, f"the schema's first field is {first['name']}, not {HEADER_FIELD}"
        header_only = {
            "type": "record",
            "name": schema["name"],
            "namespace": schema.get("namespace", ""),
            "fields": [first],
        }
        # A record schema reads as a dict (fastavro's return type is the union of every Avro value).
        parsed = fastavro.parse_schema(header_only)
        header = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(payload), parsed, None))[HEADER_FIELD]
    except Exception as exc:  # noqa: BLE001 whatever corrupt bytes or an odd schema raise: the reason is kept, the event resyncs
        return None, f"{type(exc).__name__}: {exc}"
    wrong = [name for name, kind in FIELD_TYPES.items() if not isinstance(header.get(name), kind)]
    if wrong:
        return None, f"header fields missing or of the wrong type: {', '.join(wrong)}"
    return dict(header), ""


def _names_records(header: dict[str, Any]) -> bool:
    ids = header["recordIds"]
    return bool(ids) and header["changeType"] != "GAP_OVERFLOW" and all(is_record_id(i) for i in ids)


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


def salvage(
    *,
    replay_id: bytes,
    schema_id: str,
    payload: bytes,
    schema_text: str | None,
    channel: str,
    entities: tuple[str, ...],
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
) -> Salvage:
    """Gap lines for the records a readable header names, else overflow markers (see the module docstring).
    ``schema_text`` is None when the schema could not be fetched. Whatever of the header is implausible is not
    used: an entity that is not an API name is taken from the schema or the channel, a commit time that is not
    epoch milliseconds is replaced by ``now_ms()``."""
    replay_long = replay_as_long(replay_id)
    header, _ = read_header(schema_text, payload)
    now = now_ms()
    problems = header_problems(header, now) if header is not None else {}
    commit_ts = header["commitTimestamp"] if header is not None and "commitTimestamp" not in problems else now
    if header is not None and not problems.keys() - {"commitTimestamp"} and _names_records(header):
        line = gap_marker(header | {"commitTimestamp": commit_ts}, channel, schema_id, replay_long, ORIGIN)
        records = header["recordIds"]
        named = ", ".join(records[:5]) + (", ..." if len(records) > 5 else "")
        return Salvage(
            [line],
            commit_ts,
            header["transactionKey"],
            header["entityName"],
            f"landed {line['data']['payload'][HEADER_FIELD]['changeType']} for {len(records)} "
            f"{header['entityName']} record(s) ({named}): they are reconciled by id",
        )
    if header is not None and "entityName" not in problems:
        entity: str | None = header["entityName"]
    else:
        entity = entity_of(_schema_name(schema_text)) or entity_of(channel)
    targets = (entity,) if entity else entities
    key = f"dead-letter-{replay_id.hex()}"
    lines = [
        overflow_marker(name, key, sequence, commit_ts, channel, replay_long, ORIGIN, schema_id)
        for sequence, name in enumerate(targets, start=1)
    ]
    action = (
        f"landed GAP_OVERFLOW for {', '.join(targets)}: resynced from the org"
        if targets
        else "nothing could be marked (no entity known and no replicated objects configured): run a resync of "
        "every replica by hand"
    )
    return Salvage(lines, commit_ts, key, entity, action)


def letters_folder(state_dir: str | Path, topic: str) -> str:
    return join(state_dir, f"{FOLDER_PREFIX}{topic_slug(topic)}")


class DeadLetterStore:
    """One topic's dead letters: a file per letter, unique by replay id, written durably (write, fsync, rename), so
    recording one costs its own bytes whatever came before; bounded by ``max_letters`` and ``max_bytes`` (beyond
    them a letter is counted as dropped). Only this topic's subscriber writes here."""

    def __init__(
        self, state_dir: str | Path, topic: str, *, max_letters: int = MAX_LETTERS, max_bytes: int = MAX_BYTES
    ):
        self.topic, self.max_letters, self.max_bytes = topic, max_letters, max_bytes
        self.folder = Folder(letters_folder(state_dir, topic))
        self.path = state_file(state_dir, f"{FOLDER_PREFIX}{topic_slug(topic)}")
        kept = {name: size for name, size in self.folder.walk() if is_letter_file(name)}
        self._dropped = read_dropped(self.folder)
        self._names, self._bytes = set(kept), sum(kept.values())

    @property
    def count(self) -> int:
        """Letters recorded ever: kept and dropped."""
        return len(self._names) + self._dropped.get("dropped", 0)

    def read(self) -> list[DeadLetter]:
        """The kept letters, oldest first."""
        return sorted(read_letters(self.folder, []), key=lambda x: str(x.recorded_at))

    def record(self, letter: DeadLetter) -> bool:
        """Save ``letter`` durably; False when its replay id was recorded before (re-delivered after a crash; a
        dropped letter re-delivered is counted again)."""
        name = _file_name(letter.replay_id)
        if name in self._names:
            return False
        body = json.dumps(dataclasses.asdict(letter)).encode()
        if len(self._names) >= self.max_letters or self._bytes + len(body) > self.max_bytes:
            self._drop(letter)
            return True
        self.folder.write_atomically(name, body)
        self._names.add(name)
        self._bytes += len(body)
        return True

    def _drop(self, letter: DeadLetter) -> None:
        self._dropped = {
            "topic": self.topic,
            "dropped": self._dropped.get("dropped", 0) + 1,
            "last_replay_id": letter.replay_id,
            "last_reason": letter.reason,
            "last_recorded_at": letter.recorded_at,
        }
        self.folder.write_atomically(DROPPED_FILE, json.dumps(self._dropped))
        log.warning(
            "dead letter of %s replay id %s not kept: the store %s holds its maximum (%d letters, %d bytes); "
            "%d dropped so far. Look at the kept ones, find the cause, then acknowledge them",
            self.topic,
            letter.replay_id,
            self.folder,
            self.max_letters,
            self.max_bytes,
            self._dropped["dropped"],
        )


def _file_name(replay_id_hex: str) -> str:
    """The replay id itself, or its hash when too long for a file name (replay ids are opaque bytes)."""
    return f"{replay_id_hex if len(replay_id_hex) <= 128 else hashlib.sha256(replay_id_hex.encode()).hexdigest()}.json"
