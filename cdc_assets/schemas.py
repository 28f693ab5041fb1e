"""Where an object's describe() comes from: a file named in replication.yaml, the table, or the org.

describe() defines a replica's columns (design §8). Once an object has a table, its describe() is kept with it
(the Delta table description), so routine runs make no describe call; a resync asks the org again, which is how
fields added in Salesforce reach the table (new columns are added, none dropped).
"""

from __future__ import annotations

import json

import pyarrow as pa

from cdc_assets.config import SObjectConfig
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from spark_ops.schema import ObjectSchema


def stored_describe(warehouse: DeltaWarehouse, name: str) -> dict | None:
    table = warehouse.table(name)
    if table is None or not table.metadata().description:
        return None
    try:
        return json.loads(table.metadata().description).get("describe")
    except (ValueError, AttributeError):
        return None


def resolve_describe(sobject: SObjectConfig, warehouse: DeltaWarehouse, salesforce: SalesforceResource | None,
                     *, fresh: bool = False) -> dict:
    """describe() of `sobject`: its file if configured, else (unless `fresh`) the table's copy, else the org's."""
    if sobject.describe_path:
        return sobject.load_describe()
    if not fresh and (kept := stored_describe(warehouse, sobject.name)):
        return kept
    if salesforce is None:
        raise RuntimeError(f"{sobject.name}: no describe file in replication.yaml, no table yet, and no Salesforce "
                           "connection to ask: set `describe:` for the object or configure the org (SF_* variables)")
    return salesforce.describe(sobject.name)


def resolve_schema(sobject: SObjectConfig, warehouse: DeltaWarehouse, salesforce: SalesforceResource | None,
                   *, fresh: bool = False) -> tuple[ObjectSchema, dict]:
    describe = resolve_describe(sobject, warehouse, salesforce, fresh=fresh)
    schema = ObjectSchema.from_describe(describe, bucket_chars=sobject.bucket_chars)
    table = warehouse.table(sobject.name)
    if table is not None:
        # Columns already in the table stay, with the type they have (schema evolution never drops a column).
        known = set(schema.column_names)
        extra = {f.name: _sf_type(f.type) for f in pa.schema(table.schema().to_arrow())
                 if f.name not in known and not f.name.startswith("_sf_")}
        schema = schema.with_columns(extra) if extra else schema
    return schema, describe


def _sf_type(arrow_type: pa.DataType) -> str:
    """A Salesforce type that maps back to a stored column's type (design §8), for columns describe() lost."""
    for check, sf_type in ((pa.types.is_boolean, "boolean"), (pa.types.is_integer, "int"),
                           (pa.types.is_floating, "double"), (pa.types.is_date, "date"),
                           (pa.types.is_timestamp, "datetime")):
        if check(arrow_type):
            return sf_type
    return "string"


def refresh_schema(sobject: SObjectConfig, warehouse: DeltaWarehouse,
                   salesforce: SalesforceResource | None) -> ObjectSchema:
    """The schema from a fresh describe() (the org's, or the file again), kept with the table for later runs."""
    schema, describe = resolve_schema(sobject, warehouse, salesforce, fresh=True)
    table = warehouse.table(sobject.name)
    if table is not None and not sobject.describe_path:
        table.alter.set_table_description(json.dumps({"describe": describe}))
    return schema
