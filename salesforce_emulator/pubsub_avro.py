"""Change events in the Pub/Sub API's form: one Avro schema per entity, and CometD JSON -> Avro binary.

The emulator builds each event once, in the Streaming API (CometD) JSON shape (``cdc.py``); its Pub/Sub server
re-encodes that same event the way Salesforce delivers it over gRPC, so the two channels can never disagree:

- the schema (``<Entity>ChangeEvent``) has ``ChangeEventHeader`` first, then every field an event can carry, each
  optional (``["null", type]``); a compound field is one nested record (``BillingAddress``: ``Address``, Contact
  ``Name``: ``Switchable_PersonName``), placed where its first component is;
- every field is present in every event: an UPDATE's unchanged fields are null, and ``changedFields`` /
  ``nulledFields`` / ``diffFields`` become bitmaps (``cdc_subscriber.bitmap``);
- datetimes are epoch milliseconds (``long``), dates epoch days (``int``), as Avro has no date type of its own here.

The schema id is the object's ``schema_id``, the same string the CometD events carry in ``data.schema``.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
from typing import Any

import fastavro

from cdc_subscriber.bitmap import encode as encode_bitmap
from salesforce_emulator.changes import EVENT_EXCLUDED
from salesforce_emulator.schema import OBJECTS, SObject
from salesforce_emulator.values import FLOAT_TYPES, TEXT_TYPES, iso_to_ms

NAMESPACE = "com.sforce.eventbus"
CHANGE_TYPES = ["CREATE", "UPDATE", "DELETE", "UNDELETE", "GAP_CREATE", "GAP_UPDATE", "GAP_DELETE", "GAP_UNDELETE",
                "GAP_OVERFLOW", "SNAPSHOT"]
_EPOCH = dt.date(1970, 1, 1)
_STRINGS = {"type": "array", "items": "string"}
HEADER_SCHEMA = {
    "type": "record", "name": "ChangeEventHeader", "namespace": NAMESPACE, "fields": [
        {"name": "entityName", "type": "string"},
        {"name": "recordIds", "type": _STRINGS},
        {"name": "changeType", "type": {"type": "enum", "name": "ChangeType", "symbols": CHANGE_TYPES}},
        {"name": "changeOrigin", "type": "string"},
        {"name": "transactionKey", "type": "string"},
        {"name": "sequenceNumber", "type": "int"},
        {"name": "commitTimestamp", "type": "long"},
        {"name": "commitNumber", "type": "long"},
        {"name": "commitUser", "type": "string"},
        {"name": "nulledFields", "type": _STRINGS},
        {"name": "diffFields", "type": _STRINGS},
        {"name": "changedFields", "type": _STRINGS},
    ]}
_COMPOUND_RECORDS = {"address": "Address"}


def _avro_type(sf_type: str) -> str:
    if sf_type == "boolean":
        return "boolean"
    if sf_type == "int":
        return "int"
    if sf_type in FLOAT_TYPES:
        return "double"
    if sf_type == "date":
        return "int"
    if sf_type == "datetime":
        return "long"
    if sf_type in TEXT_TYPES:
        return "string"
    raise ValueError(f"no Avro type for Salesforce type {sf_type}")


@functools.cache
def avro_schema(entity: str) -> dict[str, Any]:
    """The ``<Entity>ChangeEvent`` Avro schema (JSON form)."""
    obj = OBJECTS[entity]
    fields: list[dict[str, Any]] = [{"name": "ChangeEventHeader", "type": HEADER_SCHEMA}]
    defined: set[str] = set()
    for fld in obj.fields:
        if fld.name in EVENT_EXCLUDED or not fld.stored:
            continue
        if fld.compound is None:
            fields.append({"name": fld.name, "type": ["null", _avro_type(fld.type)], "default": None})
            continue
        if any(f["name"] == fld.compound for f in fields):
            continue
        parent = obj.field(fld.compound)
        record_name = _COMPOUND_RECORDS.get(parent.type if parent else "", "Switchable_PersonName")
        if record_name in defined:
            record: Any = f"{NAMESPACE}.{record_name}"
        else:
            defined.add(record_name)
            record = {"type": "record", "name": record_name, "namespace": NAMESPACE, "fields": [
                {"name": c.key or c.name, "type": ["null", _avro_type(c.type)], "default": None}
                for c in obj.components(fld.compound)]}
        fields.append({"name": fld.compound, "type": ["null", record], "default": None})
    return {"type": "record", "name": f"{obj.name}ChangeEvent", "namespace": NAMESPACE, "fields": fields}


@functools.cache
def schema_json(entity: str) -> str:
    return json.dumps(avro_schema(entity), separators=(",", ":"))


@functools.cache
def _parsed(entity: str) -> Any:
    return fastavro.parse_schema(avro_schema(entity))


def schema_id(entity: str) -> str:
    return OBJECTS[entity].schema_id


def entity_for_schema(schema_id_: str) -> str | None:
    return next((name for name, obj in OBJECTS.items() if obj.schema_id == schema_id_), None)


def _to_avro(sf_type: str, value: Any) -> Any:
    if value is None:
        return None
    if sf_type == "datetime":
        return iso_to_ms(value)
    if sf_type == "date":
        return (dt.date.fromisoformat(value) - _EPOCH).days
    return value


def _record(obj: SObject, schema: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for fld in schema["fields"][1:]:
        name = fld["name"]
        value = body.get(name)
        described = obj.field(name)
        if described is not None and not described.parent:
            record[name] = _to_avro(described.type, value)
        elif value is not None:  # a compound: every component, unchanged ones null
            record[name] = {c.key or c.name: _to_avro(c.type, value.get(c.key or c.name))
                            for c in obj.components(name)}
        else:
            record[name] = None
    return record


def encode_event(event: dict[str, Any]) -> tuple[str, bytes]:
    """A CometD event (``{"channel", "data": {"schema", "payload", "event"}}``) -> (schema id, Avro payload)."""
    payload = event["data"]["payload"]
    header = payload["ChangeEventHeader"]
    entity = header["entityName"]
    obj = OBJECTS[entity]
    schema = avro_schema(entity)
    body = {k: v for k, v in payload.items() if k != "ChangeEventHeader"}
    record = _record(obj, schema, body)
    record["ChangeEventHeader"] = {
        **header,
        "changedFields": encode_bitmap(header.get("changedFields") or [], schema),
        "nulledFields": encode_bitmap(header.get("nulledFields") or [], schema),
        "diffFields": encode_bitmap(header.get("diffFields") or [], schema),
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(entity), record)
    return obj.schema_id, out.getvalue()
