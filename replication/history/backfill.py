"""A history for a replica that existed before `history: true`: backfilled from change_events, once.

The first run of a replica with history on and no history table builds one, before the replica step commits
anything, for every replica version so far (its checkpoint: the replica's version + 1); from then on the replica's
runs stage and land versions as usual (replication/history/catch_up.py). A replica created with history on starts
with an empty history (checkpoint 0) and lands its initial load like any resync.

**What the backfill covers.** It starts from the replica's *initial snapshot*, its version 0 when that was an
initial load (Bulk API 2.0; its rows become `snapshot` versions), else from nothing (a replica that followed the
events from the start). Over it, it folds every change row of the object still in change_events from the
snapshot's replay point through the replica's checkpoint (`spark_ops/history.py`: one version per record per
transaction), and stops before the first overflow (after an overflow the events no longer tell every change,
until a resync's snapshot). Finally each record whose derived state differs from the replica's current row gets
one more version: the replica's row, with its `_sf_source` (snapshot, reconcile, poll or cdc).

So the history of a record is exact (every transaction) up to whichever comes first: its first gap or late event,
an event whose payload change_events retention trimmed (`change_events_retention_hours`), an event stored before
the object was replicated (untyped), or the first overflow; after that it holds the record's current state only.
The replica's version 0 must still be readable (its files not vacuumed, its log not expired): otherwise the
history starts from the replica's current rows alone, as one version per record, and a warning says so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession

from object_schema.describe import ObjectSchema
from replication.apply import APPLY_APP
from replication.closure import overflows
from replication.diffs import resolve_diffs
from replication.history.catch_up import HistoryResult, commit_history, history_target
from replication.history.chain import IS_CURRENT, chain, sync_versions
from replication.history.stage import history_name
from replication.records import stamped
from replication.state import REPLICA_STATE, ReplicaState
from resources.delta import CHANGE_EVENTS, DeltaWarehouse, aligned_arrow, read_table
from resources.spark import from_arrow
from spark_ops.fold import GAP_PREFIX
from spark_ops.history import transaction_versions

log = logging.getLogger(__name__)

FIELD_CHANGES = ("CREATE", "UPDATE", "UNDELETE", "SNAPSHOT")


def ensure_history(
    spark: Callable[[], SparkSession],
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    *,
    replica: DeltaTable | None,
    run_id: str,
) -> HistoryResult | None:
    """Create the history table if there is none: empty before a replica exists, else backfilled. None if it
    existed."""
    if warehouse.table(history_name(schema.name)) is not None:
        return None
    target = history_target(schema)
    if replica is None:
        table = commit_history(warehouse, schema, None, target.empty_table(), through=0, versions=0, run_id=run_id)
        return HistoryResult(through=0, table=table)
    return backfill(spark, warehouse, schema, replica, run_id=run_id)


def _initial_snapshot(warehouse: DeltaWarehouse, replica: DeltaTable) -> tuple[pa.Table, int] | None:
    """The replica's version 0 rows and the first ingest it replays, if version 0 was an initial load (an empty
    base and ingest 1 if it was not); None if version 0 can no longer be read."""
    try:
        first = DeltaTable(replica.table_uri, version=0, storage_options=dict(warehouse.storage_options))
        raw = (first.history(1)[0] or {}).get(REPLICA_STATE)
        state = ReplicaState.from_dict(json.loads(raw) if raw else {})
        if state.resynced is None:
            return None if raw is None else (pa.table({}), 1)
        return read_table(first), state.applied_through + 1
    except (OSError, DeltaError, pa.ArrowException) as exc:  # files vacuumed, log expired: the fallback, logged
        log.warning(
            "%s: the replica's version 0 cannot be read (%s): the history starts from its current rows",
            replica.table_uri,
            exc,
        )
        return None


def _events(
    warehouse: DeltaWarehouse, schema: ObjectSchema, start: int, stop: int, state: ReplicaState
) -> pa.Table | None:
    """Change rows of the object with ingest in [start, stop], before the first overflow, without the held
    transaction; rows that can no longer be folded (payload trimmed, stored untyped) become gaps."""
    events = warehouse.table(CHANGE_EVENTS)
    if events is None or stop < start:
        return None
    rows = warehouse.read(
        events,
        partitions=[("entity", "=", schema.name)],
        filter=(pc.field("_ingest_seq") >= start) & (pc.field("_ingest_seq") <= stop),
        prune=[("_ingest_seq", ">=", start), ("_ingest_seq", "<=", stop)],
    )
    over = overflows(rows)
    if pc.any(over).as_py():
        first = pc.min(pc.filter(rows["_ingest_seq"], over)).as_py()
        rows = rows.filter(pc.less(rows["_ingest_seq"], first))
    if state.held:
        held = pc.and_(
            pc.is_in(rows["transaction_key"], value_set=pa.array(state.held.transactions, pa.string())),
            pc.greater_equal(rows["_ingest_seq"], state.held.from_seq),
        )
        rows = rows.filter(pc.invert(held))
    with_fields = pc.is_in(rows["change_type"], value_set=pa.array(FIELD_CHANGES))
    trimmed = pc.and_(
        pc.equal(pc.list_value_length(rows["fields"]), 0), pc.greater(pc.list_value_length(rows["set_fields"]), 0)
    )
    untyped = pc.invert(pc.fill_null(rows["typed"], False))
    lost = pc.fill_null(pc.and_(with_fields, pc.or_(trimmed, untyped)), False)
    if pc.any(lost).as_py():
        rows = rows.set_column(
            rows.schema.get_field_index("change_type"),
            "change_type",
            pc.if_else(lost, pc.binary_join_element_wise(GAP_PREFIX, rows["change_type"], ""), rows["change_type"]),
        )
    return rows


def backfill(
    spark: Callable[[], SparkSession],
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    replica: DeltaTable,
    *,
    run_id: str,
) -> HistoryResult:
    """Create the history of an existing replica (module docstring), checkpoint: its version + 1."""
    target, data_columns = history_target(schema), [c for c, _ in schema.columns]
    through = replica.version() + 1
    state = ReplicaState.read(warehouse, replica)
    now_rows = aligned_arrow(read_table(replica), schema.arrow_schema())
    initial = _initial_snapshot(warehouse, replica)
    if initial is None:
        rows = chain(target.empty_table(), sync_versions(now_rows, target.empty_table(), data_columns, target), target)
    else:
        base, start = initial
        base = aligned_arrow(base, schema.arrow_schema())
        versions = [sync_versions(base, target.empty_table(), data_columns, target)]
        events = _events(warehouse, schema, start, replica.transaction_version(APPLY_APP) or 0, state)
        if events is not None and events.num_rows:
            session = spark()  # only when there are events to fold: a polled object's run needs no Spark
            current = from_arrow(session, base)
            events, _ = resolve_diffs(events, current, schema)
            folded = transaction_versions(from_arrow(session, events), current, schema).toArrow()
            versions.append(aligned_arrow(stamped(folded, datetime.now(UTC)), target))
        rows = chain(target.empty_table(), pa.concat_tables(versions), target)
        latest = rows.filter(rows[IS_CURRENT])
        final = sync_versions(now_rows, latest, data_columns, target)  # what gaps, resyncs and reconciles made
        if final.num_rows:
            closing = chain(latest, final, target)
            touched = pc.is_in(rows["Id"], value_set=final["Id"])
            rows = pa.concat_tables([rows.filter(pc.invert(pc.and_(touched, rows[IS_CURRENT]))), closing])
    log.info(
        "%s: history backfilled with %d versions through replica version %d", schema.name, rows.num_rows, through - 1
    )
    table = commit_history(
        warehouse, schema, None, rows, through=through, versions=rows.num_rows, run_id=run_id, backfilled=True
    )
    return HistoryResult(counts={"history_versions": rows.num_rows, "history_commits": 1}, through=through, table=table)
