"""A changefeed per replica (YDB CDC semantics): the replica's changes since the feed's own checkpoint, as JSON lines.

**Source.** Replicas keep a Delta Change Data Feed (resources/delta.py), so every merge and overwrite also writes
its change rows. An export reads the CDF of the replica versions after the feed's position, nets them by `Id` per
version (cdc_assets/changefeed_rows.py: a soft delete is an erase, an undelete a create, a bookkeeping-only update
nothing, and a resync's overwrite only the difference it made) and writes them, in (version, Id) order, to
`<uri>/<Object>/<first>-<last>.jsonl` (resources/changefeed_store.py), at most `max_versions_per_file` versions a
file, each file closed by a resolved line.

**Guarantees.**
- *Exactly once.* A file is written under a temporary name and renamed; the feed's position is the last version
  of its newest file, so a crash before the rename re-exports the same versions and a crash after it exports
  nothing twice. The records are a function of the replica's history alone (no clock, no run id): a re-run
  writes byte-identical files.
- *Per-key order.* A key changes at most once per version and versions are written in order.
- *Initial scan* (`initial_scan: true`): the first export writes every live row of the replica at the version it
  starts from (op `r`; YDB: an update with its image). Without it the feed starts with the changes after that
  version. A replica created before its CDF was on gets it here (one commit; the asset runs in the replica's
  pool, so it never races the replica's writer) and the feed starts at that commit.
- *Virtual timestamps* `[version, commit ms]` on every record; *resolved timestamps*: each file ends with
  `{"resolved": [v, ms]}` (everything at versions <= v is in the feed), and every export, even one with nothing
  new, rewrites `resolved.json` with the newest version it saw and the wall-clock time it looked
  (`{"resolved": [v, now_ms]}`: no version after v existed at now).

The CDF of a version must still exist when it is exported: run the feed more often than the replica is vacuumed.
"""


import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_assets.changefeed_config import ChangefeedConfig
from cdc_assets.changefeed_rows import (
    data_columns, line, net_changes, render, resolved, snapshot_changes,
)
from cdc_assets.config import ReplicationConfig, SObjectConfig
from cdc_assets.faults import fault_point
from resources.changefeed_store import FeedStore, feed_file_name
from resources.delta import CHANGE_EVENTS, DeltaWarehouse, read_table

log = logging.getLogger(__name__)

GROUP = "changefeed"
SOURCE_NAME = "salesforce"  # Debezium source.name (the logical server name)


def changefeed_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([GROUP, name])


@dataclass
class ExportResult:
    position: int | None = None  # last replica version in the feed
    files: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  # per op
    seconds: float = 0.0


def _commit_ms(table: DeltaTable, since: int) -> dict[int, int]:
    """Delta commit time (ms) of every version from `since` on."""
    return {int(h["version"]): int(h["timestamp"]) for h in table.history(table.version() - since + 1)}


def _cdf(table: DeltaTable, first: int, last: int) -> pa.Table:
    reader = table.load_cdf(starting_version=first, ending_version=last)
    return pa.table(pa.RecordBatchReader.from_stream(reader).read_all())


def _transaction_keys(warehouse: DeltaWarehouse, name: str, rows: pa.Table, column: str) -> dict[int, str]:
    """Salesforce transaction key of each commit number (`column`) the rows were last written by (from
    change_events; rows written by a snapshot, reconcile or poll have none)."""
    numbers = pc.unique(rows[column].drop_null()).to_pylist() if column in rows.column_names else []
    events = warehouse.table(CHANGE_EVENTS) if numbers else None
    if events is None:
        return {}
    found = warehouse.read(events, partitions=[("entity", "=", name)], columns=["commit_number", "transaction_key"],
                           filter=pc.field("commit_number").isin(numbers),
                           prune=[("commit_number", ">=", min(numbers)), ("commit_number", "<=", max(numbers))])
    return dict(zip(found["commit_number"].to_pylist(), found["transaction_key"].to_pylist()))


def export_changefeed(warehouse: DeltaWarehouse, name: str, feed: ChangefeedConfig, *,
                      now: datetime | None = None) -> ExportResult:
    """Bring the feed of replica `name` up to the replica's latest version (see the module docstring)."""
    started = time.monotonic()
    now = now or datetime.now(timezone.utc)
    store = FeedStore(feed.object_uri(name))
    result = ExportResult()
    if left := store.drop_leftovers():
        log.info("%s changefeed: removed %d files a crashed export left: %s", name, len(left), left)
    table = warehouse.enable_change_feed(name)
    if table is None:
        return result
    latest = table.version()
    position = store.position()
    if position is not None and position > latest:
        raise RuntimeError(
            f"{name} changefeed at {store.uri} is at replica version {position}, but the replica is at {latest}: the "
            f"table was recreated. Its versions are not the feed's any more; move the feed folder away (consumers "
            f"start again from a new feed, with initial_scan for the rows) and re-run.")
    ms = _commit_ms(table, latest if position is None else position)
    count = result.records
    debezium = feed.format == "debezium_json"

    def write(first: int, last: int, changes, columns: list[str]) -> None:
        def lines():
            for change in changes:
                count[change["op"]] = count.get(change["op"], 0) + 1
                yield line(render(change, columns, mode=feed.mode, fmt=feed.format, name=SOURCE_NAME, table=name))
            yield line(resolved(last, ms[last]))

        file = feed_file_name(first, last)
        store.write(file, lines(), before_rename=lambda: fault_point("changefeed.before_rename"))
        result.files.append(file)
        fault_point("changefeed.after_rename")

    if position is None:  # the first export: the feed starts at the latest version
        if feed.initial_scan:
            rows = read_table(table)
            keys = _transaction_keys(warehouse, name, rows, "_sf_commit_number") if debezium else {}
            scan = ({**c, "txid": keys.get(c.get("_sf_commit_number__post"))}
                    for c in snapshot_changes(rows, version=latest, commit_ms=ms[latest]))
            write(latest, latest, scan, data_columns(rows.schema))
        else:  # no rows to emit: the table's schema names the columns, no data file is read
            write(latest, latest, (), data_columns(pa.schema(table.schema().to_arrow())))
        position = latest
    while position < latest:
        first, last = position + 1, min(latest, position + feed.max_versions_per_file)
        cdf = _cdf(table, first, last)
        netted = net_changes(cdf)
        keys = _transaction_keys(warehouse, name, netted, "_sf_commit_number__post") if debezium else {}
        changes = ({**c, "commit_ms": ms[c["version"]], "txid": keys.get(c.get("_sf_commit_number__post"))}
                   for c in netted.to_pylist())
        write(first, last, changes, data_columns(cdf.schema))
        position = last
    store.write_resolved({**resolved(latest, int(now.timestamp() * 1000)), "at": now.isoformat()})
    result.position, result.seconds = position, time.monotonic() - started
    log.info("%s changefeed: %d files through version %d, records %s", name, len(result.files), position, count)
    return result


def build_changefeed_asset(*, sobject: SObjectConfig) -> dg.AssetsDefinition:
    feed = sobject.changefeed
    assert feed is not None
    from cdc_assets.assets import replica_key  # the replica assets module imports much; only the key is needed

    @dg.asset(
        key=changefeed_key(sobject.name), deps=[replica_key(sobject.name)], group_name=GROUP,
        kinds={"delta", "json"}, pool=f"replica_{sobject.name}",  # the replica's pool: see enable_change_feed
        description=f"Changefeed of the {sobject.name} replica ({feed.mode}, {feed.format}) at "
                    f"{feed.object_uri(sobject.name)}: its changes since the feed's position as JSON lines, exactly "
                    f"once, per-key ordered, with virtual and resolved timestamps (cdc_assets/changefeed.py).",
    )
    def changefeed(context: dg.AssetExecutionContext, warehouse: DeltaWarehouse) -> dg.MaterializeResult:
        result = export_changefeed(warehouse, sobject.name, feed)
        context.log.info(f"{sobject.name} changefeed: {len(result.files)} files, records {result.records}, "
                         f"through replica version {result.position}")
        return dg.MaterializeResult(metadata={
            "feed_uri": dg.MetadataValue.path(feed.object_uri(sobject.name)),
            "position": dg.MetadataValue.int(-1 if result.position is None else result.position),
            "files_written": dg.MetadataValue.int(len(result.files)),
            "records": dg.MetadataValue.int(sum(result.records.values())),
            **{f"records_{op}": dg.MetadataValue.int(n) for op, n in sorted(result.records.items())},
            "seconds_export": dg.MetadataValue.float(round(result.seconds, 3)),
        })

    return changefeed


def build_changefeed_assets(*, replication: ReplicationConfig) -> list[dg.AssetsDefinition]:
    return [build_changefeed_asset(sobject=o) for o in replication.objects if o.changefeed is not None]
