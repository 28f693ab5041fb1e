"""`<Object>__fields`: what describe() says of each replicated object's fields and record types, as a Delta table
beside the replica, so analysts read labels, types and picklist labels the way Salesforce users see them.

One row per field describe() lists (`kind` "field": API name, label, Salesforce type, length, precision, scale,
nillable, custom, calculated, the objects a reference points to, picklist values with their labels; `replicated`:
whether it is a column of the replica), one per column the replica keeps for a field the org no longer serves or
types otherwise (`status` hidden or removed; retyped or recreated for a column rewritten to follow it; from `cdc.field_access`: replication/field_access.py; `status`
binary for a base64 field, never replicated: object_schema/describe.py `BINARY_REASON`; not_an_api_name for a field
whose name may not become a column: `NAME_REASON`), and one per record type
(`kind` "record_type": name, label, id, active, default; describe()'s `recordTypeInfos`).

Kept current by the describe() the replica keeps: every replica run compares a fingerprint of that describe(), the
marks and the replica's columns with the one the catalog's last commit stored, and rewrites the catalog (one
overwrite commit) only when it differs, so a describe refresh, a field added, hidden or retyped shows here after the
run that saw it. A crash in between leaves the older catalog, which the next run replaces.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
from deltalake import DeltaTable

from object_schema.describe import BINARY_TYPES, ObjectSchema, well_named
from replication.schemas import field_marks, stored_describe
from resources.delta import DeltaWarehouse

CATALOG_SUFFIX = "__fields"
CATALOG_STATE = "field_catalog"
BINARY = "binary"  # the status of a base64 field: never a column (object_schema/describe.py BINARY_REASON)
UNNAMED = "not_an_api_name"  # a field whose name is no API name: never a column (object_schema/describe.py NAME_REASON)
PICKLIST_VALUE = pa.struct(
    [("value", pa.string()), ("label", pa.string()), ("active", pa.bool_()), ("default_value", pa.bool_())]
)
CATALOG_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("name", pa.string()),
        ("label", pa.string()),
        ("type", pa.string()),
        ("length", pa.int64()),
        ("precision", pa.int64()),
        ("scale", pa.int64()),
        ("nillable", pa.bool_()),
        ("custom", pa.bool_()),
        ("calculated", pa.bool_()),
        ("reference_to", pa.list_(pa.string())),
        ("picklist_values", pa.list_(PICKLIST_VALUE)),
        ("replicated", pa.bool_()),
        ("status", pa.string()),
        ("record_type_id", pa.string()),
        ("active", pa.bool_()),
        ("default", pa.bool_()),
    ]
)


def catalog_name(name: str) -> str:
    return f"{name}{CATALOG_SUFFIX}"


def catalog_rows(describe: dict, marks: dict[str, dict], columns: list[str]) -> pa.Table:
    """The catalog of one object: its fields, the kept columns describe() no longer lists, its record types."""
    replicated = set(columns)
    rows = [
        {
            "kind": "field",
            "name": str(f.get("name")),
            "label": f.get("label"),
            "type": f.get("type"),
            "length": f.get("length"),
            "precision": f.get("precision"),
            "scale": f.get("scale"),
            "nillable": f.get("nillable"),
            "custom": f.get("custom"),
            "calculated": f.get("calculated"),
            "reference_to": f.get("referenceTo") or None,
            "picklist_values": [
                {
                    "value": p.get("value"),
                    "label": p.get("label"),
                    "active": p.get("active"),
                    "default_value": p.get("defaultValue"),
                }
                for p in f.get("picklistValues") or []
            ]
            or None,
            "replicated": f.get("name") in replicated,
            "status": marks.get(f.get("name"), {}).get("status") or _status(f),
        }
        for f in describe.get("fields", [])
    ]
    listed = {f.get("name") for f in describe.get("fields", [])}
    rows += [
        {"kind": "field", "name": n, "type": m.get("type"), "replicated": True, "status": m.get("status")}
        for n, m in sorted(marks.items())
        if n not in listed
    ]
    rows += [
        {
            "kind": "record_type",
            "name": r.get("developerName"),
            "label": r.get("name"),
            "record_type_id": r.get("recordTypeId"),
            "active": r.get("active"),
            "default": r.get("defaultRecordTypeMapping"),
        }
        for r in describe.get("recordTypeInfos") or []
    ]
    return pa.Table.from_pylist(rows, schema=CATALOG_SCHEMA)


def _status(field: dict) -> str | None:
    """Why a field describe() lists is never a column, if it is one of those never replicated."""
    if not well_named(field):
        return UNNAMED
    return BINARY if field.get("type") in BINARY_TYPES else None


def refresh_field_catalog(
    warehouse: DeltaWarehouse, schema: ObjectSchema, table: DeltaTable | None
) -> DeltaTable | None:
    """Rewrite `<Object>__fields` if the describe() kept with the replica `table`, its marks or its columns changed
    since the catalog was written (module docstring); returns the catalog (None: no replica, or no describe())."""
    describe = stored_describe(warehouse, schema.name, table=table) if table is not None else None
    if table is None or not describe:
        return None
    marks = field_marks(table)  # kept columns (hidden, removed) and followed ones (retyped, recreated)
    columns = [f.name for f in table.schema().fields]
    text = json.dumps([describe, marks, columns], sort_keys=True, default=str)
    fingerprint = hashlib.sha256(text.encode()).hexdigest()[:32]
    name = catalog_name(schema.name)
    catalog = warehouse.table(name)
    if catalog is not None and warehouse.commit_state(catalog, CATALOG_STATE).get("fingerprint") == fingerprint:
        return catalog
    rows = catalog_rows(describe, marks, columns)
    return warehouse.overwrite(
        name,
        pa.RecordBatchReader.from_batches(CATALOG_SCHEMA, rows.to_batches()),
        read=catalog,
        partition_by=[],
        key=CATALOG_STATE,
        state={"fingerprint": fingerprint},
        txns={},
        description=f"What describe() says of Salesforce {schema.name}'s fields and record types.",
    )
