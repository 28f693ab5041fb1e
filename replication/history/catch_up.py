"""Bring a history table up to its replica: every replica version after the history's checkpoint, in order.

The history's checkpoint is the app transaction `cdc_history` (and `HistoryState.through`): replica versions below
it are in the history. For each replica version from there on, read from the replica's own log:

- an apply commit that carries its `HistoryMark` (replication/state.py) lands the versions it staged (none if its
  mark names no file), and nothing else: they are the per-transaction states the run derived with its cut;
- any other commit that wrote rows with replica state (resync, initial load, reconcile, poll; or an apply made
  while history was off) lands the versions its rows make (`chain.sync_versions`, rows read from the replica's
  Change Data Feed of that version);
- commits that change no rows (OPTIMIZE, VACUUM, table properties) or carry no replica state: nothing.

Each replica version that makes versions is one history commit (a merge by `Id`, `_version` naming its
partitions), which moves the checkpoint past it; a final empty commit moves it past versions that made none.
A crash anywhere leaves the checkpoint at the first version not landed, and the next run lands it from the same
staged file or the same Change Data Feed: the same history.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.changefeed.rows import plain
from replication.history.chain import IS_CURRENT, VERSION, chain, history_schema, sync_versions
from replication.history.stage import history_name
from replication.retype import retype_history
from replication.state import REPLICA_STATE, HistoryState
from resources.delta import CHANGE_FEED, DeltaWarehouse, aligned_arrow
from resources.delta_changes import change_batches, change_files, change_schema
from resources.staged import drop_staged, read_staged
from shared.faults import fault_point

log = logging.getLogger(__name__)

HISTORY_APP = "cdc_history"
# Operations that write rows: a resync or initial load that swaps staged files in commits WRITE (overwrite) or CREATE
# TABLE (a new table made from its files, replication/snapshot.py); CREATE TABLE AS SELECT is the name Delta writers
# such as Spark give a table created with its rows.
DATA_OPERATIONS = frozenset({"WRITE", "MERGE", "UPDATE", "DELETE", "CREATE TABLE", "CREATE TABLE AS SELECT"})
POST_IMAGES = ("insert", "update_postimage")
CDF_BATCH_ROWS = 65_536


@dataclass
class HistoryResult:
    counts: dict[str, int] = field(default_factory=lambda: {"history_versions": 0, "history_commits": 0})
    through: int = 0
    table: DeltaTable | None = None


def history_target(schema: ObjectSchema) -> pa.Schema:
    return history_schema(schema.arrow_schema())


def current_versions(
    warehouse: DeltaWarehouse, history: DeltaTable | None, schema: ObjectSchema, ids: list[str]
) -> pa.Table:
    """The current versions of `ids`, read from their partitions only."""
    target = history_target(schema)
    if history is None or not ids:
        return target.empty_table()
    buckets = sorted({i[: schema.bucket_chars] for i in ids})
    rows = warehouse.read_keys(history, key_column="Id", keys=ids, partitions=[(BUCKET_COLUMN, "in", buckets)])
    rows = aligned_arrow(rows, target)
    return rows.filter(pc.fill_null(rows[IS_CURRENT], False))


def commit_history(
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    history: DeltaTable | None,
    rows: pa.Table,
    *,
    through: int,
    versions: int,
    run_id: str,
    backfilled: bool = False,
) -> DeltaTable:
    """Merge `rows` (from `chain`) into the history with its checkpoint `through`, in one commit against `history`
    (None: create it)."""
    name = history_name(schema.name)
    state = HistoryState(through=through, versions=versions, backfilled=backfilled, run_id=run_id)
    txns = {HISTORY_APP: through}
    fault_point("history.before_commit")
    # A history has no Change Data Feed of its own: nothing reads it, and it would double every write.
    table = warehouse.commit_rows(
        name,
        rows,
        read=history,
        key_column=["Id", VERSION],
        partition_column=BUCKET_COLUMN,
        key=state.KEY,
        state=state.to_dict(),
        txns=txns,
        configuration={CHANGE_FEED: "false"},
    )
    fault_point("history.after_commit")
    return table


def written_rows(replica: DeltaTable, version: int) -> pa.Table:
    """The rows replica `version` wrote (its Change Data Feed's post-images), in the table's types now: a version
    from before a column was retyped (replication/retype.py) reads in the new type (resources/delta_changes.py)."""
    files = change_files(replica, version, version)
    cdf = plain(pa.Table.from_batches(list(change_batches(replica, files, CDF_BATCH_ROWS)), change_schema(replica)))
    rows = cdf.filter(pc.is_in(cdf["_change_type"], value_set=pa.array(POST_IMAGES)))
    return rows.drop_columns(
        [c for c in ("_change_type", "_commit_version", "_commit_timestamp") if c in rows.column_names]
    )


def catch_up(warehouse: DeltaWarehouse, schema: ObjectSchema, *, run_id: str) -> HistoryResult:
    """Land every replica version after the history's checkpoint (module docstring)."""
    result = HistoryResult()
    name, target = schema.name, history_target(schema)
    replica, history = warehouse.table(name), warehouse.table(history_name(name))
    if replica is None or history is None:
        return result
    # A replica column rewritten with its field's new type (replication/retype.py): the history's follows first.
    history = retype_history(warehouse, history_name(name), history, target, app=HISTORY_APP)
    through, latest = history.transaction_version(HISTORY_APP) or 0, replica.version()
    data_columns = [c for c, _ in schema.columns]
    commits = {int(c["version"]): c for c in replica.history(latest - through + 1)} if through <= latest else {}
    landed = through
    for version in range(through, latest + 1):
        commit = commits.get(version, {})
        raw = commit.get(REPLICA_STATE)
        state = json.loads(raw) if raw else {}
        mark = state.get("history")
        if mark and mark.get("version") == version:
            staged = mark.get("file")
            versions = (
                aligned_arrow(read_staged(warehouse.root, history_name(name), staged), target) if staged else None
            )
        elif raw and commit.get("operation") in DATA_OPERATIONS:
            written = written_rows(replica, version)
            current = current_versions(warehouse, history, schema, written["Id"].to_pylist())
            versions = sync_versions(written, current, data_columns, target)
        else:
            versions = None
        if versions is None or not versions.num_rows:
            continue
        current = current_versions(warehouse, history, schema, pc.unique(versions["Id"]).to_pylist())
        history = commit_history(
            warehouse,
            schema,
            history,
            chain(current, versions, target),
            through=version + 1,
            versions=versions.num_rows,
            run_id=run_id,
        )
        landed = version + 1
        result.counts["history_versions"] += versions.num_rows
        result.counts["history_commits"] += 1
    if landed <= latest:  # versions that made none: move the checkpoint past them
        history = commit_history(
            warehouse, schema, history, target.empty_table(), through=latest + 1, versions=0, run_id=run_id
        )
        result.counts["history_commits"] += 1
    drop_staged(warehouse.root, history_name(name), below=latest + 1)
    result.through, result.table = max(latest + 1, through), history
    return result
