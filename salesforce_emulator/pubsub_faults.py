"""What the emulator's Pub/Sub API may do to replay ids and events beyond the happy path (``FaultConfig``).

**Replay ids.** The protocol says a replay id is opaque bytes; Salesforce's happen to be 8-byte longs today, and a
subscriber that relies on that breaks the day they are not. With ``opaque_replay_ids`` the server issues
``MAGIC + n (little-endian, minimal) + check byte``: 4 to 7 bytes for any id below 2**32 (never 8: a 5-byte
number is padded), so neither ``int.from_bytes(..., "big")`` nor byte order gives the event order. The server
reads back both forms (``decode_replay``), so a position saved in either stays valid; anything else (``b"\\x01"``)
is a replay id it never issued.

**Poison events.** ``poison_events`` maps a replay id to how the server spoils that one event as it sends it (the
event log keeps it intact, so the org and the reference landing files are unaffected):

- ``"body"``: the Avro payload is cut right after the ``ChangeEventHeader`` (the first field of every change event
  schema): the header decodes, the body does not;
- ``"payload"``: every byte is ``0xFF`` (an Avro varint that never ends): nothing decodes, not even the header;
- ``"schema"``: the event names a schema id ``GetSchema`` answers ``NOT_FOUND``: nothing can be read at all;
- ``"timestamp"``: the header's ``commitTimestamp`` in nanoseconds instead of milliseconds (a writer's unit error):
  everything decodes, but the time is absurd;
- ``"entity"``: the header's ``entityName`` is 300 characters of a path (``../../``...): not an API name.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro

from salesforce_emulator.pubsub_avro import HEADER_SCHEMA

_MAGIC = b"\x5f\x0e"
UNKNOWN_SCHEMA_PREFIX = "poison-"
_HEADER_ONLY = fastavro.parse_schema(
    {
        "type": "record",
        "name": "HeaderOnly",
        "namespace": "poison",
        "fields": [{"name": "ChangeEventHeader", "type": HEADER_SCHEMA}],
    }
)


def _check(number: bytes) -> int:
    return (sum(number) ^ 0xA5) & 0xFF


def encode_replay(replay: int, opaque: bool) -> bytes:
    """The replay id the server sends for event number ``replay``."""
    if not opaque:
        return replay.to_bytes(8, "big")
    number = replay.to_bytes(max(1, (replay.bit_length() + 7) // 8), "little")
    if len(number) == 5:  # 2 + 5 + 1 = 8 bytes would read as a long: pad to 6
        number += b"\x00"
    return _MAGIC + number + bytes([_check(number)])


def decode_replay(replay_id: bytes) -> int | None:
    """The event number of a replay id this server issued (either form), or None for one it never issued."""
    if len(replay_id) == 8:
        return int.from_bytes(replay_id, "big")
    number = replay_id[len(_MAGIC) : -1]
    if replay_id.startswith(_MAGIC) and number and replay_id[-1] == _check(number):
        return int.from_bytes(number, "little")
    return None


def spoil(kind: str | None, schema_id: str, payload: bytes) -> tuple[str, bytes]:
    """(schema id, payload) as sent for a poison event of ``kind`` (None: unchanged)."""
    if kind is None:
        return schema_id, payload
    if kind == "body":
        stream = io.BytesIO(payload)
        fastavro.schemaless_reader(stream, _HEADER_ONLY, None)
        return schema_id, payload[: stream.tell()]
    if kind == "payload":
        return schema_id, b"\xff" * len(payload)
    if kind == "schema":
        return UNKNOWN_SCHEMA_PREFIX + schema_id, payload
    if kind in HEADER_SPOILS:
        stream = io.BytesIO(payload)
        header = fastavro.schemaless_reader(stream, _HEADER_ONLY, None)["ChangeEventHeader"]
        spoiled = io.BytesIO()  # the header's fields come first: a new header, then the body's bytes as they were
        fastavro.schemaless_writer(spoiled, _HEADER_ONLY, {"ChangeEventHeader": header | HEADER_SPOILS[kind](header)})
        return schema_id, spoiled.getvalue() + payload[stream.tell() :]
    raise ValueError(f"unknown poison kind {kind!r}")


HEADER_SPOILS = {
    "timestamp": lambda header: {"commitTimestamp": header["commitTimestamp"] * 1_000_000},
    "entity": lambda header: {"entityName": ("../" * 100)[: 300 - len(header["entityName"])] + header["entityName"]},
}


def poisoned(faults: Any, replay: int) -> str | None:
    return faults.poison_events.get(replay) if faults is not None else None
