"""change_events -> one replica table, one Delta merge per run (docs/design/contract.md §5-§8).

A replica remembers in its own commits how far it has applied: the app transaction `cdc_apply` holds the
change_events ingest sequence number applied through, and the commit state (`ReplicaState`, replication/state.py)
holds what a re-run needs besides: the still-open transaction held back, a pending resync.

A run reads only the change rows of its object ingested since that checkpoint through the run's cut (plus the rows
of a transaction it held back), holds back the transaction the cut says is open (decided once a run, for all its
replicas: replication/closure.py), records overflow as a pending resync, folds the rest with the current rows of the
touched records (read by partition), and writes the changed rows and the new checkpoint in one commit
(`DeltaWarehouse.commit_rows`: it creates the table, commits the checkpoint alone, or merges). Re-running after a
crash at any point gives the same table. `apply_changes` is those steps in order, each a function of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import EllipsisType

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.closure import Cut, held_back, overflows, pending_resync
from replication.describe_drift import DRIFT_COUNTS, meet_describe
from replication.diffs import DIFF_COUNTS, RESOLVE_INPUT, resolve_frame_diffs
from replication.history.stage import before_overflow, stage_versions
from replication.records import stamped
from replication.run import ApplyRun
from replication.state import Held, ReplicaState
from replication.timing import Stopwatch
from resources.delta import CHANGE_EVENTS, DeltaWarehouse, aligned_arrow, next_version
from resources.spark import from_arrow, to_arrow
from shared.faults import fault_point
from spark_ops.fold import CHANGED, INSERTED, NAMES_TO_FETCH, NEWLY_DIRTY, SUMMED, fold_changes
from spark_ops.history import transaction_versions

log = logging.getLogger(__name__)

APPLY_APP = "cdc_apply"
EVENT_COUNTS = ("events_read", "applied", "gaps", "late", "superseded", "dirty_skipped", "held", "overflow")
# Every count a run reports (materialization metadata, and the commit state), in the order shown.
APPLY_COUNTS = (*EVENT_COUNTS, NAMES_TO_FETCH, NEWLY_DIRTY, INSERTED, "rows_written", *DIFF_COUNTS, *DRIFT_COUNTS)


@dataclass
class ApplyResult:
    counts: dict[str, int] = field(default_factory=dict)
    state: ReplicaState = field(default_factory=ReplicaState)
    version: int | None = None
    committed: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    schema: ObjectSchema | None = None  # the schema applied with (describe() may have been refreshed)
    unknown_fields: list[str] = field(default_factory=list)  # set by events, unknown even to a fresh describe()
    table: DeltaTable | None = None  # the replica after the run (no need to load it again)


def _seq_filter(applied: int, ce_seq: int, held: Held | None) -> pc.Expression:
    seq = pc.field("_ingest_seq")
    new = (seq > applied) & (seq <= ce_seq)
    if held and held.transactions:
        again = (seq >= held.from_seq) & (seq <= applied) & pc.field("transaction_key").isin(held.transactions)
        return new | again
    return new


def read_changes(
    warehouse: DeltaWarehouse, entity: str, applied: int, ce_seq: int, held: Held | None
) -> pa.Table | None:
    """Change rows of `entity` ingested after `applied` (through `ce_seq`), plus those of held transactions."""
    table = warehouse.table(CHANGE_EVENTS)
    holding = held if held is not None and held.transactions else None  # None: no transaction to read again
    if table is None or (ce_seq <= applied and holding is None):
        return None
    lowest = min(applied + 1, holding.from_seq) if holding is not None else applied + 1
    return warehouse.read(
        table,
        partitions=[("entity", "=", entity)],
        filter=_seq_filter(applied, ce_seq, held),
        prune=[("_ingest_seq", ">=", lowest), ("_ingest_seq", "<=", ce_seq)],
    )


def read_current(
    spark: SparkSession, warehouse: DeltaWarehouse, schema: ObjectSchema, ids: list[str], table: DeltaTable | None
) -> DataFrame:
    """Current rows of `ids` in the replica snapshot `table`, read from their partitions only."""
    if table is None or not ids:
        return from_arrow(spark, schema.arrow_schema().empty_table())
    buckets = sorted({i[: schema.bucket_chars] for i in ids})
    rows = warehouse.read_keys(table, key_column="Id", keys=ids, partitions=[(BUCKET_COLUMN, "in", buckets)])
    return from_arrow(spark, aligned_arrow(rows, schema.arrow_schema()))


def apply_changes(
    run: ApplyRun,
    *,
    cut: Cut,
    description: str | None = None,
    replica: DeltaTable | EllipsisType | None = ...,
) -> ApplyResult:
    """Apply the closed transactions ingested since the checkpoint, through the run's `cut` (and holding its open
    transaction, replication/closure.py); `description` is kept on a new table. `replica`: the replica's snapshot if
    the caller has it (None: no table yet), else it is loaded; the checkpoint is read from it and the commit made
    against it.

    The steps: read the checkpoint and the change rows since it (`read_changes`), set aside what is held or
    overflowed (`split_rows`), fold the rest over the current rows (`fold_rows`), commit rows and checkpoint
    together (`commit_apply`)."""
    warehouse, schema = run.warehouse, run.schema
    watch = Stopwatch()
    replica = warehouse.table(schema.name) if replica is ... else replica
    prev = ReplicaState.read(warehouse, replica)
    applied = (replica.transaction_version(APPLY_APP) or 0) if replica is not None else 0
    counts = dict.fromkeys(APPLY_COUNTS, 0)
    if replica is not None and cut.through < applied:
        # A later run applied past this run's cut; applying this run's cut now could apply what that run held.
        return _uncommitted(replica, prev, applied, counts)

    rows = read_changes(warehouse, schema.name, applied, cut.through, prev.held)
    fault_point("replica.after_read_changes")
    state = carried_state(prev, applied=applied, cut=cut, run_id=run.run_id, now=run.now)
    changes, state, split_counts = split_rows(rows, cut.open_key, state)
    counts |= split_counts
    folded = Folded(rows=schema.arrow_schema().empty_table(), schema=schema)
    if changes is not None and changes.num_rows:
        folded = fold_rows(run, changes, replica=replica, applied=applied, watch=watch)
        counts |= folded.counts

    counts["rows_written"] = folded.rows.num_rows
    if replica is not None and cut.through <= applied and state.held == prev.held and not folded.rows.num_rows:
        # Nothing new, nothing held differently: no commit (the checkpoint did not move).
        return _uncommitted(replica, prev, applied, counts, watch=watch, folded=folded)

    table, state = commit_apply(
        warehouse, folded, replace(state, counts=counts), replica=replica, description=description, history=run.history
    )
    watch.lap("merge")
    fault_point("replica.after_commit")
    return ApplyResult(
        counts=counts,
        state=state,
        version=table.version(),
        committed=True,
        seconds=watch.seconds,
        schema=folded.schema,
        unknown_fields=folded.unknown,
        table=table,
    )


def _uncommitted(
    replica: DeltaTable,
    prev: ReplicaState,
    applied: int,
    counts: dict[str, int],
    *,
    watch: Stopwatch | None = None,
    folded: Folded | None = None,
) -> ApplyResult:
    """The result of a run that commits nothing: the replica and its checkpoint as they were."""
    return ApplyResult(
        counts=counts,
        state=replace(prev, applied_through=applied),
        version=replica.version(),
        seconds=watch.seconds if watch else {},
        schema=folded.schema if folded else None,
        unknown_fields=folded.unknown if folded else [],
        table=replica,
    )


def carried_state(prev: ReplicaState, *, applied: int, cut: Cut, run_id: str, now: datetime) -> ReplicaState:
    """The replica's commit state for this run, before its changes are looked at: the checkpoint moved to the
    cut, and what a run carries from the last one.

    Carried: a pending resync and the last resync (replication/closure.py judges overflows against them); an active
    poll cursor (a reconcile or resync run of a polled object applies too; dropping the cursor would restart polling
    behind the replica's newest row, past changes never read); the last reconcile (the org_knows_ids check judges
    what it found); the org the records come from. Not carried: an inactive cursor (after a poll -> cdc hand-off the
    object is CDC's), the held transaction (`split_rows` decides it again), counts."""
    return ReplicaState(
        applied_through=max(applied, cut.through),
        resync_pending=prev.resync_pending,
        resynced=prev.resynced,
        reconciled=prev.reconciled,
        last_commit_ts=prev.last_commit_ts,
        run_id=run_id,
        synced_at=now.isoformat(),
        poll=prev.poll if prev.poll and prev.poll.active else None,
        org=prev.org,
    )


def split_rows(
    rows: pa.Table | None, open_key: str | None, state: ReplicaState
) -> tuple[pa.Table | None, ReplicaState, dict[str, int]]:
    """The change rows to fold: `rows` less those the run holds back (its open transaction) and the overflow
    markers, by the rules of replication/closure.py; the state recording what is held and the resync an overflow
    leaves pending; the counts `events_read`, `held`, `overflow`. No rows read: nothing to fold, `state` as is."""
    if rows is None or not rows.num_rows:
        return None, state, {}
    held_mask, now_held = held_back(rows, open_key)
    overflow_mask = pc.and_not(overflows(rows), held_mask)
    counts = {
        "events_read": rows.num_rows,
        "held": int(pc.sum(held_mask).as_py() or 0),
        "overflow": int(pc.sum(overflow_mask).as_py() or 0),
    }
    state = replace(state, held=now_held, resync_pending=pending_resync(rows, overflow_mask, state))
    return rows.filter(pc.invert(pc.or_(held_mask, overflow_mask))), state, counts


@dataclass
class Folded:
    """What the fold of one run's changes gives: the replica rows to write (stamped, in the table's schema), the
    history versions (if the replica keeps a history), the schema applied with, counts, fields still unknown."""

    rows: pa.Table
    schema: ObjectSchema
    versions: pa.Table | None = None
    counts: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


def fold_rows(
    run: ApplyRun, changes: pa.Table, *, replica: DeltaTable | None, applied: int, watch: Stopwatch
) -> Folded:
    """`changes` folded over the current rows of the records they touch (spark_ops/fold.py), after they meet the
    replica's describe() (replication/describe_drift.py) and their text diffs are resolved (replication/diffs.py); with
    `history`, the versions they make too (spark_ops/history.py), from the same changes and current rows.

    The changes and the current rows reach Spark once each, and the fold and the versions are queries over those
    two inputs; what comes back is the fold's rows (and the versions), each in one hand-off. Only the rows of
    records with a text diff make a round trip of their own, and only when there are some (replication/diffs.py)."""
    spark, warehouse, now = run.spark, run.warehouse, run.now
    schema, changes, drift = meet_describe(run, changes, replica=replica, applied=applied)
    counts = dict(drift.counts)
    ids = pc.unique(changes["record_id"]).to_pylist()
    current = read_current(spark, warehouse, schema, ids, replica)
    changes_df = from_arrow(spark, changes.select(RESOLVE_INPUT))
    watch.lap("read")
    fault_point("replica.after_read_current")
    changes_df, diff_counts = resolve_frame_diffs(changes, changes_df, current, schema)
    counts |= diff_counts
    watch.lap("diffs")
    size = changes.num_rows + len(ids)  # the query's input rows: the changes and at most a row per id
    folded = to_arrow(fold_changes(changes_df, current, schema), rows=size)
    watch.lap("fold")
    versions = None
    if run.history:
        versions = stamped(to_arrow(transaction_versions(changes_df, current, schema), rows=size), now)
        watch.lap("history")
    fault_point("replica.after_fold")
    counts |= {n: int(pc.sum(folded[n]).as_py() or 0) for n in (*SUMMED, NEWLY_DIRTY, INSERTED)}
    counts["gaps"] -= counts["schema_backfill"]  # not events read: gaps the run added (see describe_drift.py)
    target = schema.arrow_schema()
    rows = stamped(folded.filter(folded[CHANGED]), now).select(target.names).cast(target)
    return Folded(rows=rows, schema=schema, versions=versions, counts=counts, unknown=drift.unknown)


def commit_apply(
    warehouse: DeltaWarehouse,
    folded: Folded,
    state: ReplicaState,
    *,
    replica: DeltaTable | None,
    description: str | None,
    history: bool,
) -> tuple[DeltaTable, ReplicaState]:
    """Commit the folded rows with `state` and the checkpoint in one commit against `replica`, the snapshot the
    checkpoint came from (a concurrent writer fails this commit); the history's versions are staged first, named
    in the commit (cdc_assets/history/__init__.py). Returns the table after it and the state it stored."""
    rows, schema = folded.rows, folded.schema
    if rows.num_rows and (latest := pc.max(rows["_sf_commit_ts"]).as_py()) is not None:
        state = state.with_commit_ts(latest.isoformat())
    if history:  # staged before the commit that names them
        versions = before_overflow(folded.versions, state.resync_pending)
        staged = stage_versions(warehouse, schema, versions, version=next_version(replica))
        state = replace(state, history=staged)
        fault_point("history.after_stage")
    fault_point("replica.before_commit")
    table = warehouse.commit_rows(
        schema.name,
        rows,
        read=replica,
        key_column="Id",
        partition_column=BUCKET_COLUMN,
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: state.applied_through},
        description=description,
        configuration=schema.table_properties(),
    )
    return table, state
