"""Change events in the Pub/Sub API's form: one Avro schema per entity, and CometD JSON -> Avro binary.

The emulator builds each event once, in the Streaming API (CometD) JSON shape (``cdc.py``); its Pub/Sub server
re-encodes that same event the way Salesforce delivers it over gRPC, so the two channels can never disagree. The
schema follows the ones Salesforce issues (``GetSchema``; Pub/Sub API guide, "Event Deserialization
Considerations"; the decoders of ``forcedotcom/pub-sub-api``):

- ``<Entity>ChangeEvent`` has ``ChangeEventHeader`` first, then every field an event can carry, each optional:
  a union with ``"null"`` first and a ``null`` default;
- each field's ``doc`` names its Salesforce data type, ``<role>:<type>[:<field id>]``: ``Data:Text``,
  ``Data:DateOnly``, ``Data:TimeOnly``, ``Data:DateTime``, ``Data:Currency``, ``ForeignKey:EntityId``,
  ``CreatedDate:DateTime``..., a custom field's with its ``00N`` id: Avro alone cannot tell a date from a time;
- datetimes, dates and times are ``long``: epoch milliseconds, epoch milliseconds of the date's midnight UTC, and
  milliseconds since midnight;
- a compound field is one nested record, named after its kind and defined once per schema, later fields
  referring to it by its full name (``BillingAddress`` and ``ShippingAddress`` are both ``Address``), placed where
  its first component is;
- ``Account.Name`` of a person-account org is the union ``["null", "string", Switchable_PersonName]``
  (``Data:Switchable_PersonName``): the text of a business account or the record of a person account's name; in
  an org without person accounts it has no parts, and is text like any other field;
- every field is present in every event: an UPDATE's unchanged fields are null, and ``changedFields`` /
  ``nulledFields`` / ``diffFields`` become bitmaps (``cdc_subscriber.bitmap``);
- a long text sent as a diff (CometD ``{"diff": "<unified diff>"}``) carries the diff text itself in its string
  field; ``diffFields`` names it (Change Data Capture guide, "Data Differences in Event Fields").

The schema id is the object's ``schema_id``, the same string the CometD events carry in ``data.schema``.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import io
import json
from collections.abc import Iterable
from typing import Any

import fastavro

from cdc_subscriber.bitmap import encode as encode_bitmap
from salesforce_emulator.changes import EVENT_EXCLUDED
from salesforce_emulator.schema import AUDIT_FIELDS, OBJECTS, Field, SObject
from salesforce_emulator.values import MS_PER_DAY, iso_to_ms, time_to_ms

NAMESPACE = "com.sforce.eventbus"
CHANGE_TYPES = [
    "CREATE",
    "UPDATE",
    "DELETE",
    "UNDELETE",
    "GAP_CREATE",
    "GAP_UPDATE",
    "GAP_DELETE",
    "GAP_UNDELETE",
    "GAP_OVERFLOW",
    "SNAPSHOT",
]
_EPOCH = dt.date(1970, 1, 1)
_STRINGS = {"type": "array", "items": "string"}
HEADER_SCHEMA = {
    "type": "record",
    "name": "ChangeEventHeader",
    "namespace": NAMESPACE,
    "fields": [
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
    ],
}

# Salesforce type -> (Avro type, the data type its doc names)
_TYPES: dict[str, tuple[str, str]] = {
    "boolean": ("boolean", "Boolean"),
    "int": ("int", "Integer"),
    "double": ("double", "Double"),
    "currency": ("double", "Currency"),
    "percent": ("double", "Percent"),
    "date": ("long", "DateOnly"),
    "datetime": ("long", "DateTime"),
    "time": ("long", "TimeOnly"),
    "string": ("string", "Text"),
    "picklist": ("string", "DynamicEnum"),
    "multipicklist": ("string", "MultiEnum"),
    "email": ("string", "Email"),
    "phone": ("string", "Phone"),
    "url": ("string", "Url"),
    "combobox": ("string", "DynamicEnum"),
    "encryptedstring": ("string", "EncryptedText"),
    "reference": ("string", "EntityId"),
    "id": ("string", "EntityId"),
}
_AUDIT_ROLES = {"CreatedById": "CreatedBy", "LastModifiedById": "LastModifiedBy"}


def _avro_type(fld: Field) -> str:
    if fld.type == "textarea":
        return "string"
    if fld.type not in _TYPES:
        raise ValueError(f"no Avro type for Salesforce type {fld.type}")
    return _TYPES[fld.type][0]


def field_doc(fld: Field) -> str:
    """The ``doc`` Salesforce gives a field: ``<role>:<data type>``, plus the field id of a custom field."""
    if fld.type == "textarea":
        kind = "StringPlusClob" if (fld.length or 0) > 255 else "MultiLineText"
    else:
        kind = _TYPES[fld.type][1]
    if fld.name in AUDIT_FIELDS:
        role = _AUDIT_ROLES.get(fld.name, fld.name)
    else:
        role = "ForeignKey" if fld.type == "reference" else "Data"
    doc = f"{role}:{kind}"
    if fld.name.endswith("__c"):
        doc += ":00N" + hashlib.sha256(fld.name.encode()).hexdigest()[:12].upper()
    return doc


def _optional(name: str, avro_type: Any, doc: str) -> dict[str, Any]:
    options = avro_type if isinstance(avro_type, list) else [avro_type]
    return {"name": name, "type": ["null", *options], "doc": doc, "default": None}


class _Records:
    """Named compound records of one schema: the first use defines one, later uses refer to it by full name."""

    def __init__(self) -> None:
        self.defined: set[str] = set()

    def get(self, name: str, components: list[Field]) -> Any:
        if name in self.defined:
            return f"{NAMESPACE}.{name}"
        self.defined.add(name)
        return {
            "type": "record",
            "name": name,
            "namespace": NAMESPACE,
            "fields": [_optional(c.key or c.name, _avro_type(c), field_doc(c)) for c in components],
        }


def _compound(obj: SObject, parent_name: str, records: _Records) -> dict[str, Any]:
    parent = obj.field(parent_name)
    components = obj.components(parent_name)
    if parent is not None and parent.type == "address":
        return _optional(parent_name, records.get("Address", components), "Data:Address")
    if parent is not None and parent.stored:  # a person-account org's Account.Name: text or the person's name
        return _optional(
            parent_name, ["string", records.get("Switchable_PersonName", components)], "Data:Switchable_PersonName"
        )
    return _optional(parent_name, records.get("Switchable_PersonName", components), "Data:PersonName")


Entity = str | SObject  # an object, or the name of one of the default org's (``schema.OBJECTS``)


def _object(entity: Entity) -> SObject:
    return OBJECTS[entity] if isinstance(entity, str) else entity


def avro_schema(entity: Entity) -> dict[str, Any]:
    """The ``<Entity>ChangeEvent`` Avro schema (JSON form)."""
    return _avro_schema(_object(entity))


@functools.cache
def _avro_schema(obj: SObject) -> dict[str, Any]:
    parents = {f.part_of for f in obj.fields if f.part_of}
    fields: list[dict[str, Any]] = [{"name": "ChangeEventHeader", "type": HEADER_SCHEMA}]
    placed: set[str] = set()
    records = _Records()
    for fld in obj.fields:
        if fld.name in EVENT_EXCLUDED or not fld.stored:
            continue
        name = fld.part_of or (fld.name if fld.name in parents else None)
        if name is None:
            fields.append(_optional(fld.name, _avro_type(fld), field_doc(fld)))
        elif name not in placed:
            placed.add(name)
            fields.append(_compound(obj, name, records))
    return {"type": "record", "name": f"{obj.name}ChangeEvent", "namespace": NAMESPACE, "fields": fields}


def schema_json(entity: Entity) -> str:
    return _schema_json(_object(entity))


@functools.cache
def _schema_json(obj: SObject) -> str:
    return json.dumps(_avro_schema(obj), separators=(",", ":"))


@functools.cache
def _parsed(obj: SObject) -> Any:
    return fastavro.parse_schema(_avro_schema(obj))


def schema_id(entity: Entity) -> str:
    return _object(entity).schema_id


def entity_for_schema(schema_id_: str, objects: Iterable[SObject] | None = None) -> SObject | None:
    """The object of `objects` (default: the default org's) whose change events have schema id `schema_id_`."""
    return next((obj for obj in objects or OBJECTS.values() if obj.schema_id == schema_id_), None)


def _to_avro(sf_type: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dict) and "diff" in value:
        return value["diff"]  # the Pub/Sub API carries a diff as the field's text; diffFields names it
    if sf_type == "datetime":
        return iso_to_ms(value)
    if sf_type == "date":
        return (dt.date.fromisoformat(value) - _EPOCH).days * MS_PER_DAY
    if sf_type == "time":
        return time_to_ms(value)
    return value


def _components(obj: SObject, parent: str, value: dict[str, Any]) -> dict[str, Any]:
    """A compound's record: every component, the ones the event does not carry null."""
    return {c.key or c.name: _to_avro(c.type, value.get(c.key or c.name)) for c in obj.components(parent)}


def _record(obj: SObject, schema: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for fld in schema["fields"][1:]:
        name = fld["name"]
        value = body.get(name)
        described = obj.field(name)
        if isinstance(value, dict) and "diff" not in value:  # a compound (or a person's Name): its record
            record[name] = _components(obj, name, value)
        elif described is not None and not described.parent:
            record[name] = _to_avro(described.type, value)
        else:
            record[name] = None
    return record


def encode_event(event: dict[str, Any], obj: SObject | None = None) -> tuple[str, bytes]:
    """A CometD event (``{"channel", "data": {"schema", "payload", "event"}}``) of object `obj` (default: the default
    org's object the header names) -> (schema id, Avro payload)."""
    payload = event["data"]["payload"]
    header = payload["ChangeEventHeader"]
    obj = obj or OBJECTS[header["entityName"]]
    schema = _avro_schema(obj)
    body = {k: v for k, v in payload.items() if k != "ChangeEventHeader"}
    record = _record(obj, schema, body)
    record["ChangeEventHeader"] = {
        **header,
        "changedFields": encode_bitmap(header.get("changedFields") or [], schema),
        "nulledFields": encode_bitmap(header.get("nulledFields") or [], schema),
        "diffFields": encode_bitmap(header.get("diffFields") or [], schema),
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(obj), record)
    return obj.schema_id, out.getvalue()
