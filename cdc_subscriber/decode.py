"""Pub/Sub API change events -> the Streaming API (CometD) JSON events the platform lands and parses
(docs/design/contract.md §2).

A Pub/Sub event is Avro: every field of the entity's schema is present, unchanged ones null, and the header's
``changedFields`` / ``nulledFields`` / ``diffFields`` are bitmaps (``bitmap.py``). The CometD event carries:

- CREATE / UNDELETE: every non-null field; a compound as a nested object of its non-null components;
- UPDATE: only the fields the bitmaps name, with explicit nulls (``"Phone": null``), changed compound components
  nested (``"BillingAddress": {"City": "Chicago"}``), a diff field as ``{"diff": "<unified diff>"}``;
- DELETE and GAP_*: the header only;
- the header with field *names* in ``changedFields`` / ``nulledFields`` / ``diffFields``;
- datetimes as ``2025-11-22T08:26:40.000Z``, dates as ``2025-11-22`` and times as ``08:26:40.000Z`` (what REST and
  Bulk return) instead of epoch numbers: which fields are dates, datetimes and times comes from describe() (Avro
  alone cannot tell them apart: Salesforce sends all three as longs; a date as epoch days or epoch milliseconds,
  a time as milliseconds since midnight);
- a union field is decoded by what each value is: a person-account org's ``Account.Name`` is a business
  account's text (``"Name": "Acme"``) or a person account's name record (``"Name": {"LastName": ...}``);
- a diff field (named by ``diffFields``) carries the diff text: it becomes ``{"diff": "<unified diff>"}``.

Schemas are fetched once per schema id (``GetSchema``) and cached; describe() is asked again when an entity's
schema id changes.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any, cast

import fastavro

from cdc_subscriber import bitmap
from cdc_subscriber.header import check_header
from cdc_subscriber.proto import replay_as_long

WITH_ALL_FIELDS = ("CREATE", "UNDELETE")
_EPOCH = dt.date(1970, 1, 1)
_DAYS_LIMIT = 10_000_000  # an Avro date beyond this many days is epoch milliseconds, not days


def iso_datetime(ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def iso_date(value: int) -> str:
    days = value // 86_400_000 if abs(value) > _DAYS_LIMIT else value
    return (_EPOCH + dt.timedelta(days=days)).isoformat()


def iso_time(ms: int) -> str:
    """Milliseconds since midnight -> ``HH:MM:SS.sssZ``."""
    seconds, millis = divmod(ms % 86_400_000, 1000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{millis:03d}Z"


_TEMPORAL = {"datetime": iso_datetime, "date": iso_date, "time": iso_time}


def _value(sf_type: str | None, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and sf_type in _TEMPORAL:
        return _TEMPORAL[sf_type](value)
    return value


def _components(value: Any) -> dict[str, Any]:
    """A compound's record as a dict (a union field holding its plain value instead has no components)."""
    return value if isinstance(value, dict) else {}


class EventDecoder:
    """Decodes ConsumerEvents; ``fetch_schema(schema_id)`` returns the Avro schema JSON, ``field_types(entity)``
    the describe() type of each top-level field."""

    def __init__(self, fetch_schema: Callable[[str], str], field_types: Callable[[str], dict[str, str]]):
        self.fetch_schema = fetch_schema
        self.field_types = field_types
        self._schemas: dict[str, tuple[dict[str, Any], Any, dict[str, Any]]] = {}
        self._types: dict[tuple[str, str], dict[str, str]] = {}

    def schema(self, schema_id: str) -> tuple[dict[str, Any], Any, dict[str, Any]]:
        """The schema (JSON), parsed for fastavro, and its named records (for the bitmaps)."""
        if schema_id not in self._schemas:
            schema = json.loads(self.fetch_schema(schema_id))
            self._schemas[schema_id] = (schema, fastavro.parse_schema(schema), bitmap.named_records(schema))
        return self._schemas[schema_id]

    def types(self, entity: str, schema_id: str) -> dict[str, str]:
        """describe() types, asked again whenever the entity's schema changes (a field added in the org)."""
        if (entity, schema_id) not in self._types:
            self._types[(entity, schema_id)] = self.field_types(entity)
        return self._types[(entity, schema_id)]

    def decode(self, event: Any, channel: str) -> dict[str, Any]:
        """A ``ConsumerEvent`` -> the CometD event ``{"channel", "data": {"schema", "payload", "event"}}``; raises
        ``InvalidHeader`` for a header that decodes but cannot be landed (``header.py``)."""
        schema, parsed, named = self.schema(event.event.schema_id)
        # A record schema reads as a dict (fastavro's return type is the union of every Avro value).
        record = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(event.event.payload), parsed, None))
        header = dict(record["ChangeEventHeader"])
        check_header(header)  # before describe() is asked about its entity or a file is named by its time
        names = {
            key: bitmap.decode(header.get(key), schema, named)
            for key in ("changedFields", "nulledFields", "diffFields")
        }
        header.update(names)
        types = self.types(header["entityName"], event.event.schema_id)
        if header["changeType"] in WITH_ALL_FIELDS:
            body = self._all_fields(schema, record, types)
        elif header["changeType"] == "UPDATE":
            body = self._named_fields(record, types, names)
        else:
            body = {}
        return {
            "channel": channel,
            "data": {
                "schema": event.event.schema_id,
                "payload": {"ChangeEventHeader": header, **body},
                "event": {"replayId": cometd_replay_id(event.replay_id)},
            },
        }

    @staticmethod
    def _all_fields(schema: dict[str, Any], record: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for fld in schema["fields"][1:]:
            value = record.get(fld["name"])
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if v is not None} or None
            if value is not None:
                body[fld["name"]] = _value(types.get(fld["name"]), value)
        return body

    @staticmethod
    def _named_fields(record: dict[str, Any], types: dict[str, str], names: dict[str, list[str]]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        diffs = set(names["diffFields"])
        ordered = dict.fromkeys(names["changedFields"] + names["nulledFields"] + names["diffFields"])
        for name in ordered:
            parent, dot, child = name.partition(".")
            if dot:
                body.setdefault(parent, {})[child] = _components(record.get(parent)).get(child)
                continue
            value = _value(types.get(name), record.get(name))
            body[name] = {"diff": value} if name in diffs and value is not None else value
        return body


def cometd_replay_id(replay_id: bytes) -> int | None:
    """The CometD ``replayId`` (a long): the replay id's integer when it is 8 bytes, else null (replay ids are opaque;
    the platform orders by commit position first and keeps replay ids for reference only; the subscriber's position
    keeps the bytes themselves)."""
    return replay_as_long(replay_id)


def dumps(event: dict[str, Any]) -> str:
    """One landing-zone line (compact JSON, as the emulator writes it)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)
