"""Asset checks on every replica (docs/design/contract.md §9, §10): what a reader of the table needs to be true.

One `multi_asset_check` per replica asset runs nine checks (eleven for a polled object) in one step right after the
asset (a `dg.materialize` or a sensor run that selects the asset includes them), reading the table and its replica
state (`ReplicaState`, replication/state.py) once:

- `schema` (blocking): rows written by the latest replica commit match the pandera schema built from describe();
- `unique_id` (blocking): `Id` is unique and non-null over the whole table (reads only the Id column);
- `no_pending_resync`: no overflow is waiting for a full resync; until it has run the table is missing changes
  Salesforce never sent (an ERROR, but not blocking: the pending resync is a state the platform resolves itself,
  and failing every run until then would hide real failures). A WARN while the resync is deferred because only
  damaged landing files asked for it (replication/damaged.py), naming them and when it runs: the loss is already an
  ERROR of `quarantine_empty` (the files' lines are in `_quarantine`), the wait is the platform's own choice and
  ends by itself, and an ERROR held for an hour each time a writer drops a damaged file would teach people to
  ignore the check;
- `no_stale_dirty`: no record has been dirty (awaiting reconciliation) longer than `dirty_threshold_seconds`;
- `quarantine_empty`: `_quarantine` has no rows newer than the last acknowledgement (`acknowledge_quarantine`);
- `freshness`: the newest applied change is less than the object's `freshness` (default `freshness_seconds`) old (a quiet org trips it too, so it only
  warns);
- `org_knows_ids`: the last reconcile met no id the org refuses (malformed) and at most `MAX_UNKNOWN_IDS` ids the org
  does not know (replication/refetch.py): more means a landing writer invents record ids;
- `fields_readable`: the org hides no replicated field from the integration user by field-level security
  (replication/field_access.py: the column keeps its values but follows the org no more until read access returns);
- `table_protocol`: the replica's Delta protocol (and its history table's) is one every reader of the replicas reads
  and delta-rs writes (cdc_assets/table_protocol.py);
- objects with `formulas` only (cdc_assets/formulas/freshness.py): `formulas_fresh`: no live row's formula values
  are older than twice the full-pass interval;
- polled objects only (replication/poll/compare.py): `poll_hard_deletes` (ERROR): the last Id comparison did not
  refuse its deletes (more than `poll_max_delete_share` of the live records); `poll_overlap` (WARN): it found no
  record committed later than `poll_overlap`.

`schema` and `unique_id` answer for the table's content alone (and `schema` for the expected schema): when the
table is at the version their last passing evaluation read, and the expected schema is the same, that evaluation
is reported again (`reused_from_run` in its metadata) instead of reading the table again. A landing run with
nothing to apply costs no Spark job and no scan of the Ids (bench/idle_run.py).

change_events has checks of its own (`build_change_events_checks`), run with each ingest step:
`no_failed_landing_files`: no landing file failed to ingest on its own (quarantined whole, replication/ingest.py)
since the last acknowledgement; it names them. `table_protocol`: as above, over `_change_events` and `_quarantine`.

Blocking checks are the ones under which a downstream reader would read wrong data; the others call for a person
or a sensor. Thresholds come from replication.yaml `options`. A check whose table does not exist yet passes and
says so, except `no_pending_resync`, which judges the replica state alone.
"""

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_assets.formulas.freshness import DESCRIPTION as FORMULAS_FRESH_DESCRIPTION
from cdc_assets.formulas.freshness import FORMULAS_FRESH, check_formulas_fresh
from cdc_assets.names import CHANGE_EVENTS_KEY, replica_key
from cdc_assets.table_protocol import DESCRIPTION as TABLE_PROTOCOL_DESCRIPTION
from cdc_assets.table_protocol import TABLE_PROTOCOL, check_table_protocol
from object_schema.describe import ObjectSchema
from replication.config import POLL_SOURCE, ReplicationConfig, SObjectConfig
from replication.damaged import deferred_until
from replication.field_access import FieldAccess
from replication.history.stage import history_name
from replication.ingest import FAILED_FILE
from replication.quarantine import acknowledged_until, quarantine_example
from replication.schemas import field_marks, marked_fields, resolve_schema
from replication.state import DamagedFiles, ReplicaState
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse
from resources.printable import printable, printable_list, with_more
from resources.spark import from_arrow, session, small_query
from spark_ops.validation import replica_schema, schema_errors

SCHEMA = "schema"
UNIQUE_ID = "unique_id"
NO_STALE_DIRTY = "no_stale_dirty"
NO_PENDING_RESYNC = "no_pending_resync"
QUARANTINE_EMPTY = "quarantine_empty"
FRESHNESS = "freshness"
ORG_KNOWS_IDS = "org_knows_ids"
FIELDS_READABLE = "fields_readable"
CHECKS = (
    SCHEMA,
    UNIQUE_ID,
    NO_PENDING_RESYNC,
    NO_STALE_DIRTY,
    QUARANTINE_EMPTY,
    FRESHNESS,
    ORG_KNOWS_IDS,
    TABLE_PROTOCOL,
    FIELDS_READABLE,
)
POLL_HARD_DELETES = "poll_hard_deletes"
POLL_OVERLAP = "poll_overlap"
POLL_CHECKS = (POLL_HARD_DELETES, POLL_OVERLAP)  # polled objects only (replication/poll/compare.py)
NO_FAILED_FILES = "no_failed_landing_files"  # the check on change_events
BLOCKING = frozenset({SCHEMA, UNIQUE_ID})
# Metadata naming what a check read: the table (its Delta id: a table made again has a new one) and its version.
DELTA_VERSION, TABLE_ID = "delta_version", "delta_table_id"
SCHEMA_FINGERPRINT, REUSED_FROM = "schema_fingerprint", "reused_from_run"
BY_VERSION = (SCHEMA, UNIQUE_ID)  # answers for the table version (and the expected schema) alone

DIRTY_THRESHOLD_OPTION, FRESHNESS_OPTION = "dirty_threshold_seconds", "freshness_seconds"  # ReplicationOptions
DAMAGED_RESYNC_OPTION = "damaged_resync_every"
# Dirty ids one reconcile may find unknown to the org (records created and hard-deleted before it): beyond it, a
# writer is inventing ids (each costs API calls and leaves a deleted row).
MAX_UNKNOWN_IDS = 100
EXAMPLES = 10
TS = pa.timestamp("us", tz="UTC")

DESCRIPTIONS = {
    SCHEMA: "Rows written by the latest replica commit match the schema built from describe() (column types, "
    "non-null Id and system columns, _sf_source in cdc/snapshot/reconcile/poll).",
    UNIQUE_ID: "Id is unique and non-null over the whole table: one row per record.",
    NO_PENDING_RESYNC: "No GAP_OVERFLOW is waiting for a full resync (until then the replica misses changes); warns "
    "while a resync only damaged landing files asked for waits its turn "
    f"(replication.yaml options.{DAMAGED_RESYNC_OPTION}).",
    NO_STALE_DIRTY: "No record has been dirty (awaiting reconciliation) longer than the threshold "
    f"(replication.yaml options.{DIRTY_THRESHOLD_OPTION}).",
    QUARANTINE_EMPTY: "No line quarantined since the last acknowledgement. After reviewing _quarantine, acknowledge "
    "from the UI: launch the job acknowledge_quarantine (README 'Operating from the UI').",
    FRESHNESS: "The newest applied change is recent enough "
    f"(replication.yaml `freshness` of the object, default options.{FRESHNESS_OPTION}; a quiet org also "
    "trips it).",
    POLL_HARD_DELETES: "The last Id comparison with the org applied its deletes: it did not refuse to soft-delete "
    "more than poll_max_delete_share of the live records.",
    POLL_OVERLAP: "The last Id comparison found no record committed later than poll_overlap (one it found means "
    "the overlap is too short for this org).",
    FORMULAS_FRESH: FORMULAS_FRESH_DESCRIPTION,
    TABLE_PROTOCOL: TABLE_PROTOCOL_DESCRIPTION,
    ORG_KNOWS_IDS: f"The last reconcile met no record id the org refuses as malformed and at most {MAX_UNKNOWN_IDS} "
    "ids the org does not know (neither retrieved nor found by queryAll).",
    FIELDS_READABLE: "The replica follows every replicated field: none is hidden from the integration user by "
    "field-level security, none changed type in the org beyond what its column holds (such a column keeps its "
    "values but follows the org no more).",
}


def _iso(ts: datetime | None) -> str:
    return ts.isoformat() if ts else ""


def _result(name: str, passed: bool, metadata: dict, description: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=name, passed=passed, metadata=metadata, description=description)


def _no_table(name: str, table_name: str) -> dg.AssetCheckResult:
    return _result(
        name, True, {"table": f"{table_name} does not exist yet"}, f"No {table_name} table yet: nothing to check."
    )


def check_schema(
    spark_of: Callable[[], SparkSession],
    warehouse: DeltaWarehouse,
    table: DeltaTable | None,
    state: ReplicaState,
    name: str,
    schema_of: Callable[[], ObjectSchema],
) -> dg.AssetCheckResult:
    """pandera on the Spark DataFrame of the rows the latest replica commit wrote (`_sf_synced_at` >= its sync).

    The session and the expected schema are asked for only when there are rows to validate.
    """
    if table is None:
        return _no_table(SCHEMA, name)
    synced_at = state.synced_at
    if not synced_at:
        return _result(SCHEMA, True, {"rows_checked": 0}, "No replica commit recorded yet: nothing to check.")
    since = pa.scalar(datetime.fromisoformat(synced_at), TS)
    rows = warehouse.read(table, filter=pc.field("_sf_synced_at") >= since)
    meta = {
        "rows_checked": rows.num_rows,
        "synced_at": synced_at,
        DELTA_VERSION: table.version(),
        TABLE_ID: table.metadata().id,
    }
    if not rows.num_rows:
        return _result(SCHEMA, True, meta, "The latest replica commit wrote no rows.")
    try:
        schema = schema_of()
    except RuntimeError as exc:  # no describe file and none kept with the table
        return _result(SCHEMA, False, meta, f"Cannot build the expected schema: {exc}")
    # After a resync that is every row: from_arrow keeps them out of the query plan (staged on a cluster).
    spark = spark_of()
    with small_query(spark, rows.num_rows):  # pandera runs a job per column check: few rows, few-row settings
        errors = schema_errors(from_arrow(spark, rows), replica_schema(schema))
    meta["failures"] = dg.MetadataValue.json(
        [{k: (printable(v, 300) if v is not None else None) for k, v in e.items()} for e in errors[:EXAMPLES]]
    )
    if not errors:
        return _result(SCHEMA, True, meta, f"{rows.num_rows} rows written at {synced_at} match the schema.")
    columns = sorted({str(e["column"]) for e in errors})
    return _result(
        SCHEMA,
        False,
        meta,
        f"{len(errors)} schema violations in columns {', '.join(columns)} (see failures). A wrong type "
        f"usually means a field's type changed in Salesforce: resync {name} so describe() is "
        f"read again. A null Id or an unknown _sf_source is a writer bug: do not read this commit; "
        f"restore the previous Delta version and report it.",
    )


def check_unique_id(warehouse: DeltaWarehouse, table: DeltaTable | None, name: str) -> dg.AssetCheckResult:
    if table is None:
        return _no_table(UNIQUE_ID, name)
    ids = warehouse.read(table, columns=["Id"])
    counts = ids.group_by("Id").aggregate([("Id", "count")])
    duplicates = counts.filter(pc.greater(counts["Id_count"], 1))
    nulls = ids["Id"].null_count
    meta = {
        "rows": ids.num_rows,
        "null_ids": nulls,
        "duplicate_ids": duplicates.num_rows,
        "examples": dg.MetadataValue.json(printable_list(duplicates["Id"].to_pylist(), EXAMPLES)),
        DELTA_VERSION: table.version(),
        TABLE_ID: table.metadata().id,
    }
    if not nulls and not duplicates.num_rows:
        return _result(UNIQUE_ID, True, meta, f"{ids.num_rows} rows, one per Id.")
    return _result(
        UNIQUE_ID,
        False,
        meta,
        f"{duplicates.num_rows} Ids occur more than once and {nulls} rows have no Id (examples in "
        f"metadata). A writer bypassed the per-bucket merge (e.g. a plain append by hand): keep the row "
        f"with the newest _sf_commit_ts per Id, or restore the Delta version before the bad commit, or "
        f"resync {name}.",
    )


def check_no_pending_resync(
    state: ReplicaState, name: str, *, damaged_every: float, now: datetime
) -> dg.AssetCheckResult:
    pending = state.resync_pending
    if not pending:
        return _result(NO_PENDING_RESYNC, True, {"resync_pending": ""}, "No resync pending.")
    reason = printable(pending.reason)
    meta: dict = {"resync_pending": reason, "since": pending.since, "from_seq": pending.from_seq}
    if pending.damaged and (until := deferred_until(state, damaged_every, now)):
        return _deferred_resync(meta, pending.damaged, name, until=until, every=damaged_every)
    return _result(
        NO_PENDING_RESYNC,
        False,
        meta,
        f"{reason}: Salesforce dropped changes of {name}, so the replica is incomplete "
        f"until a full resync (Bulk API queryAll). reconciliation_sensor requests it; if no resync run "
        f"follows, check that the sensor is on and materialize {name} in resync mode.",
    )


def _deferred_resync(
    meta: dict, damaged: DamagedFiles, name: str, *, until: datetime, every: float
) -> dg.AssetCheckResult:
    """`no_pending_resync` while a resync only damaged landing files asked for waits its turn: a WARN (module
    docstring) naming the files and when it runs."""
    files = ", ".join(with_more(printable_list(damaged.examples), damaged.count))
    return dg.AssetCheckResult(
        check_name=NO_PENDING_RESYNC,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        metadata=meta
        | {
            "deferred_until": until.isoformat(),
            "damaged_files": dg.MetadataValue.json(printable_list(damaged.examples)),
            "damaged_file_count": damaged.count,
        },
        description=f"Resync of {name} deferred until {until.isoformat()}: damaged landing files ({files}) lost "
        f"content that may have held changes of {name}, and it resynced for damaged files less than "
        f"{DAMAGED_RESYNC_OPTION} ({every:g} s) ago. reconciliation_sensor requests it then; the files' lines are "
        f"in _quarantine. To resync now, launch resync_objects with objects: [{name}].",
    )


def check_no_stale_dirty(
    warehouse: DeltaWarehouse, table: DeltaTable | None, name: str, *, threshold: float, now: datetime
) -> dg.AssetCheckResult:
    if table is None:
        return _no_table(NO_STALE_DIRTY, name)
    dirty = warehouse.read(table, columns=["Id", "_sf_dirty_since"], filter=pc.field("_sf_dirty_since").is_valid())
    stale = dirty.filter(pc.less(dirty["_sf_dirty_since"], pa.scalar(now - timedelta(seconds=threshold), TS)))
    oldest = pc.min(dirty["_sf_dirty_since"]).as_py() if dirty.num_rows else None
    meta = {
        "stale_records": stale.num_rows,
        "dirty_records": dirty.num_rows,
        "oldest_dirty_since": _iso(oldest),
        "oldest_dirty_seconds": (now - oldest).total_seconds() if oldest else 0.0,
        "threshold_seconds": float(threshold),
        "examples": dg.MetadataValue.json(printable_list(stale["Id"].to_pylist(), EXAMPLES)),
    }
    if not stale.num_rows:
        return _result(NO_STALE_DIRTY, True, meta, f"{dirty.num_rows} dirty records, none older than {threshold:g} s.")
    return _result(
        NO_STALE_DIRTY,
        False,
        meta,
        f"{stale.num_rows} records dirty for more than {threshold:g} s (oldest since {_iso(oldest)}): "
        f"reconciliation is not keeping up. Check that reconciliation_sensor is on and its reconcile "
        f"runs of {name} succeed (API limits, credentials), or materialize {name} in reconcile mode.",
    )


def check_quarantine_empty(warehouse: DeltaWarehouse) -> dg.AssetCheckResult:
    table = warehouse.table(QUARANTINE)
    if table is None:
        return _no_table(QUARANTINE_EMPTY, QUARANTINE)
    acked = acknowledged_until(warehouse, table)
    rows = warehouse.read(
        table,
        columns=["source_file", "source_line", "reason", "quarantined_at"],
        filter=pc.field("quarantined_at") > pa.scalar(acked, TS) if acked else None,
    )
    newest = pc.max(rows["quarantined_at"]).as_py() if rows.num_rows else None
    meta = {
        "unacknowledged_rows": rows.num_rows,
        "acknowledged_until": _iso(acked),
        "newest_quarantined_at": _iso(newest),
        "quarantine_uri": dg.MetadataValue.path(warehouse.uri(QUARANTINE)),
        "examples": dg.MetadataValue.json(
            with_more([quarantine_example(r) for r in rows.slice(0, EXAMPLES).to_pylist()], rows.num_rows)
        ),
    }
    if not rows.num_rows:
        return _result(QUARANTINE_EMPTY, True, meta, "No quarantined lines since the last acknowledgement.")
    return _result(
        QUARANTINE_EMPTY,
        False,
        meta,
        f"{rows.num_rows} lines quarantined since the last acknowledgement (examples in metadata; raw "
        f"text in {warehouse.uri(QUARANTINE)}). Fix the subscriber or re-land corrected events, then "
        f"acknowledge: launch the job acknowledge_quarantine from the UI (config until: "
        f"'{_iso(newest)}', or empty for everything so far).",
    )


NO_FAILED_FILES_DESCRIPTION = (
    "No landing file failed to ingest since the last acknowledgement: a file that breaks "
    "ingest on its own is quarantined whole so that the others go on, and its events are "
    "missing until it is landed again."
)


def check_no_failed_files(warehouse: DeltaWarehouse) -> dg.AssetCheckResult:
    """Files that failed to ingest on their own (quarantined whole, replication/ingest.py) since the last
    acknowledgement of `_quarantine`, named."""
    table = warehouse.table(QUARANTINE)
    if table is None:
        return _no_table(NO_FAILED_FILES, QUARANTINE)
    acked = acknowledged_until(warehouse, table)
    whole = pc.field("source_line") == 0
    rows = warehouse.read(
        table,
        columns=["source_file", "reason", "quarantined_at"],
        filter=whole & (pc.field("quarantined_at") > pa.scalar(acked, TS)) if acked else whole,
    )
    rows = rows.filter(pc.starts_with(rows["reason"], FAILED_FILE))
    files = sorted({printable(f) for f in rows["source_file"].to_pylist()})
    meta = {
        "failed_files": len(files),
        "acknowledged_until": _iso(acked),
        "examples": dg.MetadataValue.json(
            [f"{printable(r['source_file'])}: {r['reason']}" for r in rows.slice(0, EXAMPLES).to_pylist()]
        ),
    }
    if not files:
        return _result(NO_FAILED_FILES, True, meta, "No landing file failed to ingest since the last acknowledgement.")
    return _result(
        NO_FAILED_FILES,
        False,
        meta,
        f"{len(files)} landing files failed to ingest on their own and were quarantined whole: "
        f"{', '.join(files[:EXAMPLES])}{', ...' if len(files) > EXAMPLES else ''}. None of their events "
        f"are in change_events. The reason of each is in {warehouse.uri(QUARANTINE)} (source_line 0) "
        f"and the run's log. Fix the cause (or report it, with the file: it is kept in the landing zone "
        f"or its archive), land the file again under a new name, then acknowledge: launch the job "
        f"acknowledge_quarantine from the UI.",
    )


def build_change_events_checks() -> dg.AssetChecksDefinition:
    """The checks of change_events, run with every ingest step that materializes it (one step for both)."""
    specs = [
        dg.AssetCheckSpec(NO_FAILED_FILES, asset=CHANGE_EVENTS_KEY, description=NO_FAILED_FILES_DESCRIPTION),
        dg.AssetCheckSpec(TABLE_PROTOCOL, asset=CHANGE_EVENTS_KEY, description=TABLE_PROTOCOL_DESCRIPTION),
    ]

    @dg.multi_asset_check(specs=specs, name="change_events_checks", can_subset=True)
    def change_events_checks(context: dg.AssetCheckExecutionContext, warehouse: DeltaWarehouse):
        selected = {k.name for k in context.selected_asset_check_keys}
        if NO_FAILED_FILES in selected:
            yield check_no_failed_files(warehouse)
        if TABLE_PROTOCOL in selected:
            yield check_table_protocol({n: warehouse.table(n) for n in (CHANGE_EVENTS, QUARANTINE)})

    return change_events_checks


def check_freshness(
    table: DeltaTable | None, state: ReplicaState, name: str, *, threshold: float, now: datetime
) -> dg.AssetCheckResult:
    if table is None:
        return _no_table(FRESHNESS, name)
    last = state.last_commit_ts
    if not last:
        return _result(
            FRESHNESS,
            True,
            {"last_commit_ts": "", "threshold_seconds": float(threshold)},
            "No change applied yet: nothing to measure.",
        )
    lag = (now - datetime.fromisoformat(last)).total_seconds()
    meta = {"lag_seconds": lag, "last_commit_ts": last, "threshold_seconds": float(threshold)}
    if lag <= threshold:
        return _result(FRESHNESS, True, meta, f"Newest applied change is {lag:.0f} s old.")
    return _result(
        FRESHNESS,
        False,
        meta,
        f"Newest applied change ({last}) is {lag:.0f} s old, limit {threshold:g} s. If Salesforce had "
        f"changes since, check the CDC subscriber, landing_zone_sensor and the latest {name} runs; a "
        f"quiet org also trips this.",
    )


def check_poll_hard_deletes(state: ReplicaState, name: str) -> dg.AssetCheckResult:
    refused = state.poll.refused if state.poll else None
    if refused is None:
        return _result(POLL_HARD_DELETES, True, {"refused_records": 0}, "The last Id comparison applied its deletes.")
    share = refused.records / refused.live if refused.live else 1.0
    return dg.AssetCheckResult(
        check_name=POLL_HARD_DELETES,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "refused_records": refused.records,
            "live_records": refused.live,
            "compared_at": refused.at,
            "share": share,
            "max_share": refused.max_share,
        },
        description=f"The Id comparison of {refused.at} found {refused.records} of {refused.live} live {name} "
        f"records missing from the org ({100 * share:.1f} %, more than {100 * refused.max_share:g} %) and "
        f"deleted none. If the org really lost them, run {name} with config confirm_deletes: true; if "
        f"not (a sharing change, a partial result), fix the integration user's access: the next "
        f"comparison (or config compare_ids: true) retries.",
    )


def check_poll_overlap(state: ReplicaState, name: str, overlap: float) -> dg.AssetCheckResult:
    late = state.poll.late_found if state.poll else 0
    meta = {"late_found": late, "poll_overlap": float(overlap)}
    if not late:
        return _result(POLL_OVERLAP, True, meta, "The last Id comparison found no record committed late.")
    return dg.AssetCheckResult(
        check_name=POLL_OVERLAP,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        metadata=meta,
        description=f"The last Id comparison found {late} {name} records committed later than the poll overlap "
        f"({overlap:g} s) and replicated them; until then they were missing. Raise poll_overlap for "
        f"{name} in replication.yaml.",
    )


def check_org_knows_ids(state: ReplicaState, name: str) -> dg.AssetCheckResult:
    """What the last reconcile took out of the dirty set without a record (replication/refetch.py): any id the org
    refused, or more than `MAX_UNKNOWN_IDS` ids it does not know, fails."""
    last = state.reconciled
    if last is None:
        return _result(ORG_KNOWS_IDS, True, {"ids_unknown_to_org": 0, "ids_refused": 0}, "No reconcile yet.")
    meta = {
        "reconciled_at": last.at,
        "dirty_fetched": last.records,
        "ids_unknown_to_org": last.unknown,
        "ids_refused": last.refused,
        "max_unknown_ids": MAX_UNKNOWN_IDS,
        "unknown_examples": dg.MetadataValue.json(last.unknown_examples),
        "refused_examples": dg.MetadataValue.json(last.refused_examples),
    }
    problems = []
    if last.refused:
        problems.append(
            f"the org refused {last.refused} record ids as malformed ({'; '.join(last.refused_examples[:3])})"
        )
    if last.unknown > MAX_UNKNOWN_IDS:
        problems.append(
            f"{last.unknown} dirty ids are unknown to the org, more than {MAX_UNKNOWN_IDS} (e.g. "
            f"{', '.join(last.unknown_examples[:5])})"
        )
    if not problems:
        return _result(
            ORG_KNOWS_IDS,
            True,
            meta,
            f"The reconcile of {last.at} fetched {last.records} dirty records; {last.unknown} ids unknown "
            f"to the org (at most {MAX_UNKNOWN_IDS}), none refused.",
        )
    return _result(
        ORG_KNOWS_IDS,
        False,
        meta,
        f"The reconcile of {name} at {last.at}: {' and '.join(problems)}. No Salesforce event names such "
        f"ids: a landing writer made them up. Their rows were marked deleted and left reconciliation; "
        f"find the landing files that named them (change_events, column record_id) and fix or stop that "
        f"writer. The check passes again after a reconcile that meets none.",
    )


def check_fields_readable(table: DeltaTable | None, name: str) -> dg.AssetCheckResult:
    """Fails while the org hides a replicated field from the integration user (replication/field_access.py); a field
    deleted in the org is reported, kept with its last values, and passes; a field whose type changed, or that was
    created again under its name, is followed (its column rewritten: replication/retype.py) and reported."""
    marks = marked_fields(table)
    access = FieldAccess.of(marks)
    followed = {c: m for c, m in field_marks(table).items() if c not in marks}
    meta = {
        "fields_hidden": dg.MetadataValue.json(access.hidden),
        "fields_removed": dg.MetadataValue.json(access.removed),
        "fields_followed": dg.MetadataValue.json(
            {c: {k: m.get(k) for k in ("status", "since", "type", "column", "version")} for c, m in followed.items()}
        ),
    }
    kept = f" Deleted in the org, kept with their last values: {', '.join(access.removed)}." if access.removed else ""
    rewritten = (
        " Rewritten with the org's new type or new field: "
        + ", ".join(f"{c} ({m.get('status')} at version {m.get('version')})" for c, m in sorted(followed.items()))
        + "."
        if followed
        else ""
    )
    if not access.hidden:
        return _result(FIELDS_READABLE, True, meta, f"The replica follows every replicated field.{kept}{rewritten}")
    since = ", ".join(f"{n} since {marks[n].get('since')}" for n in access.hidden)
    problems = [
        f"{name}: the org hides {', '.join(access.hidden)} from the integration user (field-level security; "
        f"{since}). The replica keeps the values it had, but no change to them reaches it. Ask an admin of the "
        f"org to give the integration user read access again (a permission set assigned to it, with a "
        f"FieldPermissions record granting PermissionsRead on {name}.<Field>): the next run backfills the column "
        f"and the check passes."
    ]
    return _result(
        FIELDS_READABLE,
        False,
        meta,
        " ".join(problems) + f" To stop replicating a field instead, leave it out in replication.yaml "
        f"(`fields: {{exclude: [...]}}`).{kept}",
    )


def schema_fingerprint(schema: ObjectSchema) -> str:
    """What the `schema` check's expectation is built from, as a short hash: the same in every process (sets are
    sorted: their order follows the process's string hashing)."""
    text = json.dumps(
        dataclasses.asdict(schema),
        sort_keys=True,
        default=lambda v: sorted(v) if isinstance(v, (set, frozenset)) else str(v),
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reused_result(
    instance: dg.DagsterInstance, key: dg.AssetCheckKey, table: DeltaTable | None, fingerprint: str | None = None
) -> dg.AssetCheckResult | None:
    """The check's latest completed evaluation again, if it passed over this very table version (and, given a
    `fingerprint`, the same expected schema); else None: the check must run."""
    if table is None:
        return None
    history = instance.event_log_storage.get_asset_check_execution_history(
        key, limit=1, status={AssetCheckExecutionRecordStatus.SUCCEEDED}
    )
    record = history[0] if history else None
    evaluation = record.evaluation if record else None
    if record is None or evaluation is None or not evaluation.passed:
        return None
    meta = dict(evaluation.metadata)
    value = lambda name: meta[name].value if name in meta else None  # noqa: E731
    if (value(TABLE_ID), value(DELTA_VERSION), value(SCHEMA_FINGERPRINT)) != (
        table.metadata().id,
        table.version(),
        fingerprint,
    ):
        return None
    first = str(value(REUSED_FROM) or record.run_id)  # a run id, kept as text
    description = (evaluation.description or "").split(" (table version ")[0]
    return _result(
        key.name,
        True,
        meta | {REUSED_FROM: first},
        f"{description} (table version {table.version()} unchanged since run {first[:8]}: not read again)",
    )


def build_replica_checks(*, sobject: SObjectConfig, replication: ReplicationConfig) -> dg.AssetChecksDefinition:
    """The nine checks of one replica asset (and the two poll checks of a polled one), as one multi-asset check (one step, one read of the replica state).

    The expected schema comes from describe() as the asset gets it (the describe file, else the copy kept with the
    table); checks never call the org.
    """
    key = replica_key(sobject.name)
    dirty_threshold, freshness = replication.options.dirty_threshold_seconds, replication.freshness_of(sobject)
    names = (
        CHECKS
        + (POLL_CHECKS if sobject.source == POLL_SOURCE else ())
        + ((FORMULAS_FRESH,) if sobject.formulas else ())
    )
    specs = [
        dg.AssetCheckSpec(name, asset=key, blocking=name in BLOCKING, description=DESCRIPTIONS[name]) for name in names
    ]

    @dg.multi_asset_check(specs=specs, name=f"{key.to_python_identifier()}_checks", can_subset=True)
    def replica_checks(context: dg.AssetCheckExecutionContext, pyspark: PySparkResource, warehouse: DeltaWarehouse):
        selected = {k.name for k in context.selected_asset_check_keys}
        now = datetime.now(UTC)
        table = warehouse.table(sobject.name)
        state = ReplicaState.read(warehouse, table)
        expected_schema = functools.cache(lambda: resolve_schema(sobject, warehouse, None)[0])  # read once, if at all

        def by_version(name: str, check: Callable[[], dg.AssetCheckResult]) -> dg.AssetCheckResult:
            fingerprint = None
            if name == SCHEMA:
                try:
                    fingerprint = schema_fingerprint(expected_schema())
                except RuntimeError:  # no describe file and none kept: the check itself says so
                    return check()
            key = dg.AssetCheckKey(replica_key(sobject.name), name)
            if (again := reused_result(context.instance, key, table, fingerprint)) is not None:
                return again
            result = check()
            if fingerprint is None:
                return result
            return (
                result._replace(metadata={**result.metadata, SCHEMA_FINGERPRINT: dg.MetadataValue.text(fingerprint)})
                if result.passed
                else result
            )

        def formulas_fresh() -> dg.AssetCheckResult:
            assert sobject.formulas is not None, "the check is built only for an object with formulas"
            return check_formulas_fresh(table, sobject.name, sobject.formulas, now)

        run = {
            SCHEMA: lambda: check_schema(
                lambda: session(pyspark), warehouse, table, state, sobject.name, expected_schema
            ),
            UNIQUE_ID: lambda: check_unique_id(warehouse, table, sobject.name),
            NO_PENDING_RESYNC: lambda: check_no_pending_resync(
                state, sobject.name, damaged_every=replication.options.damaged_resync_every, now=now
            ),
            NO_STALE_DIRTY: lambda: check_no_stale_dirty(
                warehouse, table, sobject.name, threshold=dirty_threshold, now=now
            ),
            QUARANTINE_EMPTY: lambda: check_quarantine_empty(warehouse),
            FRESHNESS: lambda: check_freshness(table, state, sobject.name, threshold=freshness, now=now),
            ORG_KNOWS_IDS: lambda: check_org_knows_ids(state, sobject.name),
            FIELDS_READABLE: lambda: check_fields_readable(table, sobject.name),
            POLL_HARD_DELETES: lambda: check_poll_hard_deletes(state, sobject.name),
            POLL_OVERLAP: lambda: check_poll_overlap(state, sobject.name, sobject.poll.overlap),
            FORMULAS_FRESH: formulas_fresh,
            TABLE_PROTOCOL: lambda: check_table_protocol(
                {sobject.name: table}
                | ({history_name(sobject.name): warehouse.table(history_name(sobject.name))} if sobject.history else {})
            ),
        }
        for name in names:
            if name in selected:
                result = by_version(name, run[name]) if name in BY_VERSION else run[name]()
                if not result.passed:
                    context.log.warning(f"{sobject.name} check {name} failed: {result.description}")
                yield result

    return replica_checks
