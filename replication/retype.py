"""A field whose type changed in the org, or that was deleted and created again under its name: its column follows.

Salesforce lets an admin change a custom field's type (Help, "Considerations for Converting the Field Type of a Custom
Field": Number to Text keeps the values, to Number from any other type may lose them) and reuse the name of a deleted
custom field (Help, "Manage Deleted Custom Fields": the deleted field's developer name gets `_del` appended, so the
name is free). Either way the org's values of that name are no longer what the replica's column holds, and may not
fit its type (text in a double column): every read of the org naming the field would fail to convert.

So the column is **rewritten**, with no operator step: one overwrite commit of the replica in which the column has
the org's new type and holds the values the org gives for it now (one Bulk API 2.0 ``queryAll`` of ``Id`` and the
column, the backfill a revealed field gets, replication/field_access.py), every other column as it was. A record
the replica has and the org does not return gets null there (the old field's value is never shown as the new
field's); a record the org has and the replica does not yet is inserted dirty, as a backfill inserts it. The rows
are streamed file batch by file batch (bounded memory, as a resync's staged writes are); only the org's ``Id`` and
column, and the replica's ``Id``, are held whole, as a column backfill holds them.

- **Retyped**: a column whose type differs from the one describe() now gives its field (a change the column holds
  as it is, a longer Text or a larger Number, is none: a Delta string has no length and a double no precision).
- **Re-created**: a column marked removed (replication/field_access.py) whose name describe() lists again, whatever
  its type: a new field under the old name (or the old one restored: its values are read again all the same).

What happened is recorded in ``cdc.field_access`` (status ``retyped`` or ``recreated``, since when, the Salesforce
type, the column's type before and the replica version that rewrote it), marked `pending` in a commit before
the rewrite and cleared in one after it: a run that ends in between leaves the rewrite pending, and the next run of
the replica does it (a field created again with its old type shows no other sign). A history table retypes its own column the
same way when it next catches up (`retype_history`): earlier versions keep their values where the new type can hold
them (a number's text), null where it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP
from replication.counts import DIRTY_COLUMN
from replication.records import SNAPSHOT, SYNCED_AT, replica_rows
from replication.state import HistoryState, ReplicaState
from resources.delta import DeltaWarehouse, arrow_dataset, safe_cast
from resources.salesforce import SalesforceResource

log = logging.getLogger(__name__)

RETYPED, RECREATED = "retyped", "recreated"
# What a row a rewrite or a column backfill inserts holds besides Id, its columns and bucket: dirty since then, not
# deleted, and no position (`_sf_commit_ts` null), so the reconcile that reads it whole is the first to position it.
INSERTED_DIRTY = (DIRTY_COLUMN, "_sf_deleted", "_sf_source", SYNCED_AT)

Batches = Callable[[pa.RecordBatch], pa.RecordBatch]


def columns_to_follow(
    stored: dict[str, pa.DataType], wanted: dict[str, pa.DataType], removed: set[str]
) -> dict[str, str]:
    """Column -> `RETYPED` or `RECREATED`: the stored columns (name -> type) whose field describe() now types
    otherwise (`wanted`: the describe()'s columns), or lists again after they were marked `removed`."""
    follow = {c: RECREATED for c in stored if c in removed and c in wanted}
    return follow | {c: RETYPED for c, t in stored.items() if c in wanted and wanted[c] != t and c not in follow}


def _rewritten(table: DeltaTable, target: pa.Schema, change: Batches, extra: pa.Table | None) -> pa.RecordBatchReader:
    """The table's rows batch by batch through `change`, then `extra`, as `target`."""

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in arrow_dataset(table).to_batches():
            if batch.num_rows:
                yield change(batch)
        if extra is not None and extra.num_rows:
            yield from extra.cast(target).to_batches()

    return pa.RecordBatchReader.from_batches(target, batches())


def _with_columns(batch: pa.RecordBatch, target: pa.Schema, values: dict[str, pa.Array]) -> pa.RecordBatch:
    arrays = [values[f.name] if f.name in values else batch.column(f.name) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def retyped_schema(schema: pa.Schema, types: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([f.with_type(types[f.name]) if f.name in types else f for f in schema])


def org_values(salesforce: SalesforceResource, schema: ObjectSchema, columns: list[str], now: datetime) -> pa.Table:
    """The org's `Id`, `columns` (typed as `schema` types them) and bucket of every record, deleted ones included,
    with `INSERTED_DIRTY` as a row inserted for a record the replica lacks holds them."""
    fields = ["Id", *columns, *([schema.position_field] if schema.position_field else [])]
    pages = list(salesforce.bulk_query_all(schema.name, fields))
    if not pages:
        return schema.arrow_schema().empty_table().select(["Id", *columns, *INSERTED_DIRTY, BUCKET_COLUMN])
    rows = replica_rows(pa.Table.from_batches(pages), schema, source=SNAPSHOT, synced_at=now)
    dirty = rows.schema.field(DIRTY_COLUMN)
    rows = rows.set_column(
        rows.schema.get_field_index(DIRTY_COLUMN), dirty, pa.repeat(pa.scalar(now, dirty.type), len(rows))
    )
    return rows.select(["Id", *columns, *INSERTED_DIRTY, BUCKET_COLUMN])


def follow_columns(
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    table: DeltaTable,
    columns: list[str],
    *,
    run_id: str,
    now: datetime,
) -> tuple[DeltaTable, int]:
    """Rewrite `columns` of the replica `table` with the type `schema` gives them and the org's values, in one
    commit (module docstring); returns the table after it and the rows the org gave values for."""
    org = org_values(salesforce, schema, columns, now)
    wanted = schema.arrow_schema()
    target = retyped_schema(pa.schema(table.schema().to_arrow()), {c: wanted.field(c).type for c in columns})
    org_ids = org["Id"].combine_chunks()

    def change(batch: pa.RecordBatch) -> pa.RecordBatch:
        at = pc.index_in(batch.column("Id"), value_set=org_ids)
        return _with_columns(batch, target, {c: org[c].combine_chunks().take(at) for c in columns})

    have = pc.is_in(org_ids, value_set=_replica_ids(table))
    new = org.filter(pc.invert(have))
    extra = pa.table(
        [new[f.name] if f.name in new.column_names else pa.nulls(new.num_rows, f.type) for f in target], schema=target
    )
    state = replace(ReplicaState.read(warehouse, table), run_id=run_id, history=None)
    table = warehouse.overwrite(
        schema.name,
        _rewritten(table, target, change, extra),
        read=table,
        partition_by=[BUCKET_COLUMN],
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: table.transaction_version(APPLY_APP) or 0},
    )
    log.info(
        "%s: %s rewritten with the org's type and values (%d records from the org, %d of them new to the replica, "
        "inserted dirty)",
        schema.name,
        columns,
        org.num_rows,
        new.num_rows,
    )
    return table, org.num_rows


def _replica_ids(table: DeltaTable) -> pa.Array:
    ids = arrow_dataset(table).to_table(columns=["Id"])["Id"]
    return ids.combine_chunks() if ids.num_chunks else pa.array([], pa.string())


def retype_history(
    warehouse: DeltaWarehouse, name: str, history: DeltaTable, target: pa.Schema, *, app: str
) -> DeltaTable:
    """A history table whose data columns' types differ from `target` (its replica's columns were retyped, module
    docstring) rewritten with those types, in one commit that keeps its checkpoint (the app transaction `app`):
    earlier versions keep their values where the new type holds them, null where it cannot."""
    stored = pa.schema(history.schema().to_arrow())
    types = {f.name: target.field(f.name).type for f in stored if f.name in target.names}
    types = {c: t for c, t in types.items() if stored.field(c).type != t}
    if not types:
        return history
    rewritten = retyped_schema(stored, types)

    def change(batch: pa.RecordBatch) -> pa.RecordBatch:
        return _with_columns(batch, rewritten, {c: safe_cast(batch.column(c), t) for c, t in types.items()})

    state = HistoryState.read(warehouse, history)
    through = history.transaction_version(app) or 0
    table = warehouse.overwrite(
        name,
        _rewritten(history, rewritten, change, None),
        read=history,
        partition_by=[BUCKET_COLUMN],
        key=state.KEY,
        state=replace(state, versions=0).to_dict(),
        txns={app: through},
    )
    log.info(
        "%s: columns %s retyped as their replica's (%s)", name, sorted(types), {c: str(t) for c, t in types.items()}
    )
    return table
