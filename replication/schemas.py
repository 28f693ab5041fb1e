"""Where an object's describe() comes from: a file named in replication.yaml, the table, or the org.

describe() defines a replica's columns (docs/design/contract.md §8). Once an object has a table, its describe() is kept
with it (the Delta table description), so routine runs make no describe call; a resync asks the org again, which is how
fields added in Salesforce reach the table (new columns are added, none dropped).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from types import EllipsisType

import pyarrow as pa
from deltalake import DeltaTable

from object_schema.describe import ObjectSchema
from replication.config import SObjectConfig
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource

DESCRIBE_PROPERTY = "cdc.describe"  # a describe() asked again during a run (the description is set on writes only)
# Columns whose field the org no longer serves the integration user (hidden by field-level security, or deleted):
# kept in the table, never columns of the schema (replication/field_access.py).
FIELD_ACCESS_PROPERTY = "cdc.field_access"


# Statuses of the columns kept that no longer follow their field (the org hides or deleted it); the other statuses
# record a change the column followed (retyped, re-created: replication/retype.py).
NOT_FOLLOWED = frozenset({"hidden", "removed"})


def field_marks(table: DeltaTable | None) -> dict[str, dict]:
    """Every column the table records in `FIELD_ACCESS_PROPERTY` (an unreadable one: none): hidden, removed,
    retyped or re-created."""
    if table is None:
        return {}
    text = table.metadata().configuration.get(FIELD_ACCESS_PROPERTY)
    try:
        marks = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {k: v for k, v in marks.items() if isinstance(v, dict)} if isinstance(marks, dict) else {}


def marked_fields(table: DeltaTable | None) -> dict[str, dict]:
    """The columns the table keeps for a field it no longer follows: hidden or removed (`NOT_FOLLOWED`)."""
    return {k: v for k, v in field_marks(table).items() if v.get("status") in NOT_FOLLOWED}


def describe_note(describe: dict | None) -> str | None:
    """The describe() kept with the table (its description when written, `DESCRIBE_PROPERTY` after a refresh), so
    later runs need no describe call; `at` tells which of the two is newer."""
    return json.dumps({"describe": describe, "at": datetime.now(UTC).isoformat()}) if describe else None


def keep_describe(table: DeltaTable, describe: dict, properties: dict[str, str] | None = None) -> None:
    """Keep `describe` (asked again during a run) with the table, with other table `properties` in the same commit."""
    note = describe_note(describe)
    assert note is not None, "None only for an empty describe(), and the org's never is"
    table.alter.set_table_properties({DESCRIBE_PROPERTY: note, **(properties or {})}, raise_if_not_exists=False)


def _kept(text: str | None) -> dict:
    try:
        kept = json.loads(text) if text else {}
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) and kept.get("describe") else {}


def stored_describe(
    warehouse: DeltaWarehouse, name: str, *, table: DeltaTable | EllipsisType | None = ...
) -> dict | None:
    """The newest describe() kept with the table: the description written with the data, or the table property a
    refresh wrote (`at` says which is newer; a description without one is the oldest). `table`: the table's
    snapshot if the caller has one (None: no table), else it is loaded."""
    table = warehouse.table(name) if table is ... else table
    if table is None:
        return None
    metadata = table.metadata()
    kept = [_kept(metadata.description), _kept(metadata.configuration.get(DESCRIBE_PROPERTY))]
    newest = max((k for k in kept if k), key=lambda k: k.get("at") or "", default=None)
    return newest["describe"] if newest else None


def resolve_describe(
    sobject: SObjectConfig,
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource | None,
    *,
    fresh: bool = False,
    table: DeltaTable | EllipsisType | None = ...,
) -> dict:
    """describe() of `sobject`: its file if configured, else (unless `fresh`) the table's copy, else the org's."""
    if sobject.describe_path:
        describe = sobject.load_describe()
        assert describe is not None, "load_describe reads describe_path, which is set"
        return describe
    if not fresh and (kept := stored_describe(warehouse, sobject.name, table=table)):
        return kept
    if salesforce is None:
        raise RuntimeError(
            f"{sobject.name}: no describe file in replication.yaml, no table yet, and no Salesforce "
            "connection to ask: set `describe:` for the object or configure the org (SF_* variables)"
        )
    return salesforce.describe(sobject.name)


def resolve_schema(
    sobject: SObjectConfig,
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource | None,
    *,
    fresh: bool = False,
    table: DeltaTable | EllipsisType | None = ...,
) -> tuple[ObjectSchema, dict]:
    """The replica schema of `sobject` and the describe() it comes from; `table`: the replica's snapshot if the
    caller has one (None: no table yet), else it is loaded."""
    table = warehouse.table(sobject.name) if table is ... else table
    describe = resolve_describe(sobject, warehouse, salesforce, fresh=fresh, table=table)
    schema = sobject.schema_of(describe)
    if table is not None:
        # Columns already in the table stay, with the type they have (schema evolution never drops a column).
        # Formula columns are none of the CDC columns, kept or not (replication/formulas/): writers leave them alone;
        # nor are columns whose field the org no longer serves (hidden or deleted): nobody may ask the org for them.
        known = {*schema.column_names, *schema.ignored, *schema.formula_names, *marked_fields(table)}
        extra = {
            f.name: _sf_type(f.type)
            for f in pa.schema(table.schema().to_arrow())
            if f.name not in known and not f.name.startswith("_sf_")
        }
        schema = schema.with_columns(extra) if extra else schema
        # A column marked hidden or removed whose name describe() lists again (a new field under an old name) is
        # no column of the schema until its rewrite (replication/retype.py) clears the mark.
        schema = schema.without_columns(marked_fields(table))
    return schema, describe


def retyped_columns(table: DeltaTable | None, schema: ObjectSchema) -> list[str]:
    """The columns of `table` that `schema` types otherwise: a field whose type changed in the org. No writer but
    their rewrite (replication/retype.py, at the start of the next run) writes them: it reads their values from the
    org, and a fold of values of the new type into the old column would fail."""
    if table is None:
        return []
    stored = {f.name: f.type for f in pa.schema(table.schema().to_arrow())}
    return [f.name for f in schema.arrow_schema() if f.name in stored and stored[f.name] != f.type]


def _sf_type(arrow_type: pa.DataType) -> str:
    """A Salesforce type that maps back to a stored column's type, for columns describe() lost
    (docs/design/contract.md §8)."""
    for check, sf_type in (
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_integer, "int"),
        (pa.types.is_floating, "double"),
        (pa.types.is_date, "date"),
        (pa.types.is_timestamp, "datetime"),
    ):
        if check(arrow_type):
            return sf_type
    return "string"


class SchemaCatalog(Mapping[str, ObjectSchema]):
    """The replicated objects' schemas by name, each resolved (`resolve_schema`: a Delta table load, perhaps a
    describe call) only when asked for, then kept: a landing run looks up only the objects its files name."""

    def __init__(
        self, objects: Iterable[SObjectConfig], warehouse: DeltaWarehouse, salesforce: SalesforceResource | None
    ):
        self._objects = {o.name: o for o in objects}
        self._warehouse, self._salesforce = warehouse, salesforce
        self.redacts = any(o.redact_quarantine for o in self._objects.values())
        self._resolved: dict[str, ObjectSchema] = {}

    def __getitem__(self, name: str) -> ObjectSchema:
        if name not in self._resolved:
            self._resolved[name] = resolve_schema(self._objects[name], self._warehouse, self._salesforce)[0]
        return self._resolved[name]

    def __contains__(self, name: object) -> bool:
        return name in self._objects

    def asked_again(self, name: str) -> ObjectSchema | None:
        """`name`'s schema from the org's describe() asked now (None: its describe() is a file, or no org)."""
        sobject = self._objects.get(name)
        if sobject is None or sobject.describe_path or self._salesforce is None:
            return None
        return resolve_schema(sobject, self._warehouse, self._salesforce, fresh=True)[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)


def redacts(schemas: Mapping[str, ObjectSchema]) -> bool:
    """Whether any of the replicated objects redacts its quarantined lines (a catalog knows without resolving)."""
    if isinstance(schemas, SchemaCatalog):
        return schemas.redacts
    return any(s.redact_quarantine for s in schemas.values())


class DescribeRefresh:
    """describe() asked again during a run (a field events set is unknown): the new schema now, and the describe()
    kept with the table (a table property) once the run has committed, so later runs start from it. Kept after the
    commit, not before: a commit in between would race the run's own merge. If the process dies before, nothing
    is lost: the added columns are in the table with their types (`resolve_schema`), the next refresh keeps it."""

    def __init__(self, sobject: SObjectConfig, warehouse: DeltaWarehouse, salesforce: SalesforceResource | None):
        self.sobject, self.warehouse, self.salesforce = sobject, warehouse, salesforce
        self.describe: dict | None = None

    def __call__(self) -> ObjectSchema:
        table = self.warehouse.table(self.sobject.name)
        schema, self.describe = resolve_schema(self.sobject, self.warehouse, self.salesforce, fresh=True, table=table)
        return schema.without_columns(retyped_columns(table, schema))

    def keep(self) -> bool:
        """Keep the describe() asked again with the table; True if that was a commit (the table moved on)."""
        if self.describe is None or self.sobject.describe_path:
            return False
        table = self.warehouse.table(self.sobject.name)
        if table is None:
            return False
        keep_describe(table, self.describe)
        return True


class ClearValuesError(RuntimeError):
    """A replica holds values in clear in a column replication.yaml now hashes."""


def _looks_hashed(value) -> bool:
    """A digest, or the prefix of one that Delta statistics keep: lowercase hex, at least 32 characters."""
    return isinstance(value, str) and len(value) >= 32 and all(c in "0123456789abcdef" for c in value)


def refuse_clear_hashes(table: DeltaTable | None, schema: ObjectSchema) -> None:
    """Stop a run that would apply to a replica whose `hash:` columns still hold values written in clear (`hash`
    added to an existing replica): only a resync rewrites them. Read from the Delta log's per-file min/max
    statistics, so it costs no data read; a hashed column without statistics (beyond the leading 32 columns of a
    table created before it was hashed) is not checked."""
    if table is None or not schema.hashed:
        return
    stats = pa.table(table.get_add_actions(flatten=True))
    clear = sorted(
        c
        for c in schema.hashed
        for bound in (f"min.{c}", f"max.{c}")
        if bound in stats.column_names and not all(_looks_hashed(v) for v in stats[bound].to_pylist() if v is not None)
    )
    if clear:
        names = ", ".join(dict.fromkeys(clear))
        raise ClearValuesError(
            f"{schema.name}: replication.yaml hashes {names}, but the replica holds values of it in clear (written "
            f"before `hash:` named it). Resync the replica to rewrite them: materialize salesforce/{schema.name} "
            f"with run config {{mode: resync}}; until then no run applies changes to it."
        )
