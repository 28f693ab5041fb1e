"""A changefeed per replica (YDB CDC semantics): the replica's changes since the feed's own checkpoint, as JSON lines.

**Source.** Replicas keep a Delta Change Data Feed (resources/delta.py), so every merge and overwrite also writes
its change rows. An export reads the CDF of the replica versions after the feed's position, nets them by `Id` per
version (replication/changefeed/rows.py: a soft delete is an erase, an undelete a create, a bookkeeping-only update
nothing, and a resync's overwrite only the difference it made), stamps them with the feeds' shared clock
(replication/changefeed/clock.py) and writes them to `<uri>/<Object>/<first>-<last>-<resolved>.jsonl`
(resources/changefeed_store.py), at most `max_versions_per_file` versions a file.

**Guarantees.**
- *Exactly once.* A file is written under a temporary name and renamed; the feed's position is the newest file
  (its last version and resolved step), so a crash before the rename re-exports the same versions and a crash
  after it exports nothing twice. The records are a function of the replica's history and change_events alone
  (no clock, no run id): a re-run writes byte-identical files.
- *Per-key order.* A key changes at most once per version, versions are written in order, and every key lives in
  one Id-hash range (below).
- *One table.* `table.json` records the Delta table id and creation time of the replica the feed follows, written
  before the first file. A replica deleted and re-made (a new table id, whatever its version) stops the feed with
  `RecreatedReplicaError`, which says what to do: its versions are not the feed's.
- *Initial scan* (`initial_scan: true`): the first export writes every live row of the replica at the version it
  starts from (op `r`; YDB: an update with its image; Debezium: `snapshot` "true", the last one "last"). Without
  it the feed starts with the changes after that version.
- *Virtual and resolved timestamps* `[step, txId]` from change_events' ingest sequence, the same for every
  replica's feed (clock.py). YDB JSON files end with `{"resolved": [R, 0]}`; the resolved step is also in every
  file's name (so Debezium files, whose record stream holds only change records, carry it too), and every export,
  even one with nothing new, rewrites `resolved.json` (`{"resolved": [R, 0], "version": v, "at": ...}`).
- *Bounded memory.* The replica's rows and change rows are read from its Delta log and Parquet files at most
  `batch_rows` at a time, page by page even within a row group (resources/delta_changes.py), and a range of
  versions whose CDF holds more than `batch_rows` rows (a resync's overwrite holds the table twice) is
  partitioned by a hash of `Id` into spill files of at most a batch each (replication/changefeed/parts.py; a
  key's rows are all in one part) and netted part by part. Reading, netting and rendering hold a batch, whatever
  the table's size (bench/RESULTS.md, "Changefeed memory").

The CDF of a version must still exist when it is exported: run the feed more often than the replica is vacuumed.

**When.** Declarative automation (`FOLLOWS_REPLICA`, evaluated by the automation condition sensor of
sensors/changefeed.py): after every materialization of its replica, once that materialization's blocking checks
(schema, unique_id: cdc_assets/checks.py) passed. A replica whose blocking check failed is not exported: the feed
waits, still due, until a materialization of the replica passes them (a resync, or a fix and the next run).
A run that materializes the replica and its feed together (`dg.materialize`) skips the feed when a blocking check
fails, as Dagster does for anything downstream of a failed blocking check in one run.
"""

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable

from cdc_assets.names import GROUP, changefeed_key, replica_key, replica_pool
from replication.changefeed.clock import VersionTime, replica_times, resolved_after, stamp, transaction_steps
from replication.changefeed.config import ChangefeedConfig
from replication.changefeed.parts import cdf_parts
from replication.changefeed.rows import data_columns, line, net_changes, render, resolved, snapshot_changes
from replication.config import ReplicationConfig, SObjectConfig
from replication.state import REPLICA_STATE
from resources.changefeed_store import IDENTITY, FeedFile, FeedStore, feed_file_name
from resources.delta import DeltaWarehouse
from resources.delta_changes import snapshot_batches
from resources.pool_lock import exclusive
from shared.faults import fault_point

log = logging.getLogger(__name__)

SOURCE_NAME = "salesforce"  # Debezium source.name (the logical server name)
RENDER_ROWS = 10_000  # netted rows turned into Python records at a time


class RecreatedReplicaError(RuntimeError):
    """The replica is not the table the feed follows (deleted and re-made)."""


@dataclass
class ExportResult:
    position: int | None = None  # last replica version in the feed
    resolved: int | None = None  # the feed's resolved step
    files: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  # per op
    seconds: float = 0.0


def table_identity(table: DeltaTable) -> dict:
    metadata = table.metadata()
    return {"table_id": metadata.id, "created_ms": metadata.created_time}


def _check_identity(store: FeedStore, table: DeltaTable, name: str, newest: FeedFile | None) -> None:
    """Stop when the replica is not the table the feed follows, or the feed cannot tell (files but no `table.json`:
    it is written before the first file, so it was removed); record the table before the feed's first file."""
    recorded, current = store.read_identity(), table_identity(table)
    if recorded == current:
        return
    if newest is None:
        store.write_identity(current)  # a new feed
        return
    remedy = (
        f"Re-export with an initial scan: move the folder {store.uri} away, set `initial_scan: true` in {name}'s "
        f"changefeed section, and re-run changefeed/{name}; consumers start again from the new feed."
    )
    if recorded is None:
        raise RecreatedReplicaError(
            f"{name} changefeed at {store.uri} holds replica versions through {newest.last} but no {IDENTITY} "
            f"naming the Delta table they came from, so it cannot tell whether the replica at {table.table_uri} "
            f"(Delta table {current['table_id']}, now at version {table.version()}) is that table: continuing could "
            f"keep records that no longer exist and miss others. {remedy}"
        )
    raise RecreatedReplicaError(
        f"{name} changefeed at {store.uri} follows Delta table {recorded['table_id']} (created at "
        f"{recorded['created_ms']} ms), but the replica at {table.table_uri} is Delta table "
        f"{current['table_id']} (created at {current['created_ms']} ms, now at version {table.version()}): it was "
        f"deleted and re-made, so its versions are not the feed's, and continuing would keep records that no "
        f"longer exist and miss others. {remedy}"
    )


def _scan(table: DeltaTable, batch_rows: int, *, version: int, commit_ms: int, ts: list[int]) -> Iterator[dict]:
    """The replica's live rows as `r` changes, batch by batch; the last one marked `last` (Debezium's
    snapshot "last")."""
    pending = None
    for batch in snapshot_batches(table, batch_rows):
        for change in snapshot_changes(pa.Table.from_batches([batch]), version=version, commit_ms=commit_ms, ts=ts):
            if pending is not None:
                yield pending
            pending = change
    if pending is not None:
        yield {**pending, "last": True}


def _stamped(
    warehouse: DeltaWarehouse,
    name: str,
    parts: Iterator[pa.Table],
    times: dict[int, VersionTime],
    previous: int,
    applied_before: int,
) -> Iterator[dict]:
    """Netted parts as changes with their ts (clock.py), a slice at a time."""
    for part in parts:
        column = "_sf_commit_number__post"
        numbers = part[column].drop_null().unique().to_pylist() if column in part.column_names else []
        part = stamp(part, times, previous, applied_before, transaction_steps(warehouse, name, numbers))
        for chunk in part.to_batches(max_chunksize=RENDER_ROWS):
            for change in chunk.to_pylist():
                yield {
                    **change,
                    "ts": [change["ts_step"], change["ts_tx"]],
                    "commit_ms": times[change["version"]].commit_ms,
                }


def export_changefeed(
    warehouse: DeltaWarehouse, name: str, feed: ChangefeedConfig, *, now: datetime | None = None
) -> ExportResult:
    """Bring the feed of replica `name` up to the replica's latest version (see the module docstring)."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    store = FeedStore(feed.object_uri(name))
    result = ExportResult()
    if left := store.drop_leftovers():
        log.info("%s changefeed: removed %d files a crashed export left: %s", name, len(left), left)
    table = warehouse.table(name)
    if table is None:
        return result
    latest, newest = table.version(), store.newest()
    _check_identity(store, table, name, newest)
    position, previous = (newest.last, newest.resolved) if newest else (None, 0)
    if position is None:  # the feed starts at the latest version: the replica state in force there
        times = replica_times(table, latest, floor=0, state=warehouse.commit_state(table, REPLICA_STATE))
    else:  # from the feed's position: its replica state is where the next versions start from
        times = replica_times(table, position, floor=previous)
    count = result.records

    def write(first: int, last: int, resolved_step: int, changes, columns: list[str]) -> None:
        def lines():
            for change in changes:
                count[change["op"]] = count.get(change["op"], 0) + 1
                for record in render(change, columns, mode=feed.mode, fmt=feed.format, name=SOURCE_NAME, table=name):
                    yield line(record)
            if feed.format == "json":  # YDB carries resolved messages in the stream; Debezium does not
                yield line(resolved(resolved_step))

        file = feed_file_name(first, last, resolved_step)
        store.write(file, lines(), before_rename=lambda: fault_point("changefeed.before_rename"))
        result.files.append(file)
        fault_point("changefeed.after_rename")

    if position is None:  # the first export: the feed starts at the latest version
        previous = resolved_after(times, latest, 0)[-1]
        columns = data_columns(pa.schema(table.schema().to_arrow()))
        scan = (
            _scan(table, feed.batch_rows, version=latest, commit_ms=times[latest].commit_ms, ts=[previous, 0])
            if feed.initial_scan
            else ()
        )
        write(latest, latest, previous, scan, columns)
        position = latest
    while position < latest:
        first, last = position + 1, min(latest, position + feed.max_versions_per_file)
        in_range = {v: t for v, t in times.items() if first <= v <= last}
        after = resolved_after(in_range, last, previous)[-1]
        applied_before = max(t.applied_through for v, t in times.items() if v < first)
        schema, parts = cdf_parts(table, first, last, feed.batch_rows)
        netted = (net_changes(part) for part in parts)
        write(
            first,
            last,
            after,
            _stamped(warehouse, name, netted, in_range, previous, applied_before),
            data_columns(schema),
        )
        position, previous = last, after
    store.write_resolved({**resolved(previous), "version": position, "at": now.isoformat()})
    result.position, result.resolved, result.seconds = position, previous, time.monotonic() - started
    log.info(
        "%s changefeed: %d files through version %d (resolved step %d), records %s",
        name,
        len(result.files),
        position,
        previous,
        count,
    )
    return result


# Like AutomationCondition.eager(), but not held back while the replica is in progress: in a steady stream of
# landing runs it nearly always is, and the feed's pool (the replica's) keeps the export from running beside a
# write of the replica anyway. Only a replica materialization whose blocking checks passed makes the feed due.
# Due from a replica update until the feed is requested: not `since_last_handled()`, whose reset also counts the
# feed's own materializations, and a feed export ending in the same evaluation interval as a later replica
# materialization then wins over it (Dagster cannot order the two), leaving that materialization unexported until
# the replica's next one. `newly_requested()` is true on the tick *after* the request, so a replica update between
# those two ticks (after the export ran, or while it ran) would be reset by it as well and stay unexported: the
# reset does not count on a tick that also sees a replica update (at worst one more export, of nothing; the daemon
# meets this case, tests/cdc_assets/test_dagster_conventions.py). A request counts as done whatever its run does, so a
# failed export (a run that could not even start on a loaded host) is asked again every RETRY_CRON tick while it
# stays failed: the exporter is idempotent.
RETRY_CRON = "*/5 * * * *"
FOLLOWS_REPLICA = (
    (
        dg.AutomationCondition.newly_missing()
        | dg.AutomationCondition.any_deps_updated()
        | (dg.AutomationCondition.execution_failed() & dg.AutomationCondition.cron_tick_passed(RETRY_CRON))
    ).since(dg.AutomationCondition.newly_requested() & ~dg.AutomationCondition.any_deps_updated())
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.in_progress()
    & dg.AutomationCondition.all_deps_blocking_checks_passed()
).with_label("after each replica materialization whose blocking checks passed")


def build_changefeed_asset(*, sobject: SObjectConfig) -> dg.AssetsDefinition:
    feed = sobject.changefeed
    assert feed is not None

    @dg.asset(
        key=changefeed_key(sobject.name),
        deps=[replica_key(sobject.name)],
        group_name=GROUP,
        automation_condition=FOLLOWS_REPLICA,
        kinds={"delta", "json"},
        pool=replica_pool(sobject.name),  # the replica's pool: an export never runs beside a write of the replica
        description=f"Changefeed of the {sobject.name} replica ({feed.mode}, {feed.format}) at "
        f"{feed.object_uri(sobject.name)}: its changes since the feed's position as JSON lines, exactly "
        f"once, per-key ordered, with virtual and resolved timestamps (cdc_assets/changefeed/export.py).",
    )
    @exclusive(replica_pool(sobject.name))
    def changefeed(context: dg.AssetExecutionContext, warehouse: DeltaWarehouse) -> dg.MaterializeResult:
        result = export_changefeed(warehouse, sobject.name, feed)
        context.log.info(
            f"{sobject.name} changefeed: {len(result.files)} files, records {result.records}, "
            f"through replica version {result.position}"
        )
        return dg.MaterializeResult(
            metadata={
                "feed_uri": dg.MetadataValue.path(feed.object_uri(sobject.name)),
                "position": dg.MetadataValue.int(-1 if result.position is None else result.position),
                "resolved_step": dg.MetadataValue.int(-1 if result.resolved is None else result.resolved),
                "files_written": dg.MetadataValue.int(len(result.files)),
                "records": dg.MetadataValue.int(sum(result.records.values())),
                **{f"records_{op}": dg.MetadataValue.int(n) for op, n in sorted(result.records.items())},
                "seconds_export": dg.MetadataValue.float(round(result.seconds, 3)),
            }
        )

    return changefeed


def build_changefeed_assets(*, replication: ReplicationConfig) -> list[dg.AssetsDefinition]:
    return [build_changefeed_asset(sobject=o) for o in replication.objects if o.changefeed is not None]
