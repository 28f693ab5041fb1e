"""Dagster assets: the landing zone (external), change_events, and one replica asset per Salesforce object.

The asset functions only wire resources to `ingest` / `apply_changes`; the logic lives there and in spark_ops.
Metadata keys are module constants so sensors and checks read what assets write.

**What "unsynced" means here.** The ingest step materializes `change_events` (the whole table) and one slice per
object, `events/<Object>` (that object's rows of it), whose data version is the last ingest that stored rows of the
object. Each replica depends on its own slice only. Dagster marks an asset unsynced when an upstream data version
differs from the one its latest materialization read, so a replica is unsynced exactly when rows of its object were
ingested after it last applied: not after every landing run that carried other objects' events only (with one
`change_events` upstream it was, since a landing run includes only the replicas its files name). A paused
object's replica is unsynced while its events are ingested, which is true.

**One asset group** (`GROUP`) for everything: the UI draws group boxes, collapsed until opened, only when the graph
has several groups, so the global lineage opens as the graph itself; the key prefixes (`change_events`,
`events/`, `salesforce/`, `changefeed/`) name its layers and are the asset catalog's folders.
"""

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Literal

import dagster as dg
from dagster_pyspark import PySparkResource

from cdc_assets.apply import ApplyResult, apply_changes
from cdc_assets.config import ReplicationConfig, SObjectConfig
from cdc_assets.counts import dirty_count, row_count
from cdc_assets.formulas.freshness import formula_metadata
from cdc_assets.formulas.refresh import MODE as FORMULAS
from cdc_assets.formulas.refresh import FormulaResult, refresh_formulas
from cdc_assets.history.assets import history_step, record_history
from cdc_assets.ingest import ingest
from cdc_assets.org import org_for_run
from cdc_assets.poll.run import PollResult, poll, poll_state, polled_result
from cdc_assets.run_cut import pinned_cut
from cdc_assets.schemas import DescribeRefresh, SchemaCatalog, describe_note, refuse_clear_hashes, resolve_schema
from cdc_assets.sync import SyncResult, reconcile, resync
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.pool_lock import exclusive
from resources.printable import printable, printable_list
from resources.salesforce import SalesforceResource
from resources.spark import session
from spark_ops.schema import FORMULAS_AT, ObjectSchema, spark_type

LANDING_ZONE = dg.AssetKey("landing_zone")
CHANGE_EVENTS_KEY = dg.AssetKey("change_events")
GROUP = "salesforce_cdc"  # every asset of the platform (module docstring)
EVENTS_PREFIX = "events"
KINDS = {"spark", "delta", "salesforce"}

META_DELTA_VERSION = "delta_version"
META_ENTITY_SEQ = "last_ingest_with_rows"  # on events/<Object>: the ingest that last stored rows of the object
META_TABLE_URI = "table_uri"
META_APPLIED_THROUGH = "applied_through"  # the checkpoint the replica stores (moved only by a commit)
META_COMMITTED = "committed"  # whether the run's apply step committed (its state, with or without rows)
META_DIRTY = "dirty_records"
META_RESYNC = "resync_pending"
META_HELD = "held_transactions"
META_LAG = "lag_seconds"
META_API_CALLS = "api_calls"
META_UNKNOWN_FIELDS = "unknown_field_names"  # set by events, unknown even to a fresh describe(): not replicated
FILES_SHOWN = 20  # landing file names in a change_events materialization (the count is `files`)
META_POLL_CURSOR = "poll_cursor"
META_POLL_CURSOR_FIELD = "poll_cursor_field"  # SystemModstamp, LastModifiedDate or CreatedDate (from describe())
META_FAILED_FILES = "failed_files"  # on change_events: files of the run that failed on their own (quarantined whole)
META_LISTED = 20  # file names a log or metadata entry lists at most (the table has them all)
NO_FAILED_FILES = "no_failed_landing_files"  # the check on change_events (cdc_assets/checks.py)
TAG_MODE = "cdc/mode"  # on the asset: cdc or poll (the object's mode in replication.yaml); on runs: the run's modes


CHANGE_EVENTS_POOL = "change_events"


def replica_pool(name: str) -> str:
    """The Dagster pool of every step that writes (or reads for export) object `name`'s replica: one slot, and a
    host lock (resources/pool_lock.py)."""
    return f"replica_{name}"


def replica_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(["salesforce", name])


def events_key(name: str) -> dg.AssetKey:
    """The slice of change_events holding object `name`'s rows: what its replica depends on."""
    return dg.AssetKey([EVENTS_PREFIX, name])


def ingest_keys(names: Iterable[str]) -> list[dg.AssetKey]:
    """What one ingest step materializes: change_events and the slices of objects `names`."""
    return [CHANGE_EVENTS_KEY, *(events_key(n) for n in names)]


landing_zone = dg.AssetSpec(
    LANDING_ZONE,
    group_name=GROUP,
    kinds={"files"},
    description="CDC event files dropped by a subscriber (JSON lines in the Streaming API shape). "
    "Watched by landing_zone_sensor.",
)


def build_change_events_asset(*, replication: ReplicationConfig) -> dg.AssetsDefinition:
    table = dg.AssetSpec(
        CHANGE_EVENTS_KEY,
        deps=[LANDING_ZONE],
        group_name=GROUP,
        kinds={"spark", "delta"},
        description="Every CDC event line ever landed, parsed to canonical change rows and de-duplicated, with "
        "its source file and line. Bad lines go to _quarantine with a reason.",
    )
    # A slice depends on the landing zone, as the table does, not on the table: both are written by the same
    # ingest step from the same files, and a landing run carries only the slices of the objects its files name.
    # Below change_events, every slice left out of a run would show as unsynced in the UI although none of its
    # rows changed (the table's data version moves with every ingest).
    slices = [
        dg.AssetSpec(
            events_key(o.name),
            deps=[LANDING_ZONE],
            group_name=GROUP,
            kinds={"delta"},
            description=f"{o.name}'s rows of change_events (a view, no table of its own), written by the ingest step "
            f"with change_events: what salesforce/{o.name} applies. Its data version is the last ingest "
            f"that stored {o.name} rows, so it and the replica show as unsynced only when events of "
            f"{o.name} were ingested after the replica last applied.",
        )
        for o in replication.objects
    ]

    @dg.multi_asset(name="change_events", specs=[table, *slices], can_subset=True, pool=CHANGE_EVENTS_POOL)
    @exclusive(CHANGE_EVENTS_POOL)
    def change_events(
        context: dg.AssetExecutionContext,
        pyspark: PySparkResource,
        warehouse: DeltaWarehouse,
        landing: LandingZone,
        salesforce: SalesforceResource,
    ) -> Iterator[dg.MaterializeResult]:
        schemas = SchemaCatalog(replication.objects, warehouse, salesforce)  # resolved for the objects that landed
        result = ingest(
            session(pyspark),
            warehouse,
            landing,
            schemas,
            run_id=context.run.run_id,
            max_batch_bytes=replication.options.max_ingest_batch_bytes,
        )
        c = result.counts
        context.log.info(
            f"Ingested {c['ingested']} events from {c['files']} files ({c['duplicates']} duplicates, "
            f"{c['lines_quarantined']} lines quarantined, {c['files_quarantined']} files unreadable, "
            f"{c['files_failed']} files failed)"
        )
        for example in result.quarantine_examples:
            context.log.warning(f"Quarantined {example}")
        for path in result.failed[:META_LISTED]:
            context.log.error(
                f"Landing file {printable(path)} failed to ingest on its own: quarantined whole, its "
                f"events are not in change_events (check {NO_FAILED_FILES} says what to do)"
            )
        selected = context.selected_asset_keys
        if CHANGE_EVENTS_KEY in selected:
            yield dg.MaterializeResult(
                asset_key=CHANGE_EVENTS_KEY,
                metadata={
                    **{k: dg.MetadataValue.int(v) for k, v in c.items()},
                    META_TABLE_URI: dg.MetadataValue.path(warehouse.uri("_change_events")),
                    META_DELTA_VERSION: dg.MetadataValue.int(result.version if result.version is not None else -1),
                    "ingest_seq": dg.MetadataValue.int(result.state.ingest_seq),
                    "files_ingested": dg.MetadataValue.json(printable_list(result.files, FILES_SHOWN)),
                    META_FAILED_FILES: dg.MetadataValue.json([printable(f) for f in result.failed[:META_LISTED]]),
                    **{f"seconds_{k}": dg.MetadataValue.float(round(v, 3)) for k, v in result.seconds.items()},
                },
            )
        for o in replication.objects:
            if events_key(o.name) in selected:
                seq = int(result.state.entity_seq.get(o.name, 0))
                yield dg.MaterializeResult(
                    asset_key=events_key(o.name),
                    data_version=dg.DataVersion(str(seq)),
                    metadata={META_ENTITY_SEQ: dg.MetadataValue.int(seq)},
                )

    return change_events


class ReplicaRunConfig(dg.Config):
    # apply: the object's own (cdc or poll); formulas: refresh the formula columns (cdc_assets/formulas/), then apply
    mode: Literal["apply", "reconcile", "resync", "poll", "formulas"] = "apply"
    formulas_full: bool = False  # formulas: read every record's formula values, whatever full_every says
    compare_ids: bool = False  # poll: compare Ids with the org now (hard deletes), whatever the schedule
    # poll: compare Ids now and apply its deletes even beyond poll_max_delete_share (check poll_hard_deletes failed
    # and the org really lost those records)
    confirm_deletes: bool = False
    # Overrides replication.yaml for this run (the run's first replica step decides for all: cdc_assets/closure.py).
    transaction_close_after: float | None = None


def column_schema(schema: ObjectSchema) -> dg.TableSchema:
    formulas = [(c, spark_type(t).simpleString()) for c, t in schema.formulas] + (
        [(FORMULAS_AT, "timestamp")] if schema.formulas else []
    )
    return dg.TableSchema(
        columns=[
            *(dg.TableColumn(f.name, f.dataType.simpleString()) for f in schema.spark_schema().fields),
            *(dg.TableColumn(name, kind, description="formula field (refresh runs)") for name, kind in formulas),
        ]
    )


def build_replica_asset(*, sobject: SObjectConfig, replication: ReplicationConfig) -> dg.AssetsDefinition:
    file_schema = sobject.schema_from_file()
    static_metadata = {"dagster/column_schema": column_schema(file_schema)} if file_schema else {}

    @dg.asset(
        key=replica_key(sobject.name),
        deps=[events_key(sobject.name)],
        group_name=GROUP,
        kinds=KINDS,
        pool=replica_pool(sobject.name),
        metadata=static_metadata,
        tags={TAG_MODE: sobject.mode},
        # How old its latest materialization may get (replication.yaml `freshness`): the UI marks it stale past it.
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(seconds=replication.freshness_of(sobject))
        ),
        description=f"Replica of Salesforce {sobject.name}: one row per record id ever seen, kept current from "
        f"Change Data Capture. Soft deletes (_sf_deleted); dirty rows (_sf_dirty_since) await "
        f"reconciliation. Modes: apply (CDC), reconcile (fetch dirty records), resync (Bulk API 2.0), "
        f"poll (records changed since a SystemModstamp cursor, for objects without CDC), formulas "
        f"(refresh the formula columns, when replication.yaml keeps them). This "
        f"object: {sobject.mode}.",
    )
    @exclusive(replica_pool(sobject.name))
    def replica(
        context: dg.AssetExecutionContext,
        config: ReplicaRunConfig,
        pyspark: PySparkResource,
        warehouse: DeltaWarehouse,
        salesforce: SalesforceResource,
    ) -> dg.MaterializeResult:
        now, run_id = datetime.now(UTC), context.run.run_id
        sync: SyncResult | None = None
        polled = config.mode == "poll" or (sobject.mode == "poll" and config.mode in ("apply", FORMULAS))
        # The replica's snapshot, loaded once and handed to each step that reads it (a step that commits moves it).
        # A history reads the replica's Change Data Feed: on from here if the replica was made without one.
        table = warehouse.enable_change_feed(sobject.name) if sobject.history else warehouse.table(sobject.name)
        # A polled object always starts from a full copy: its cursor begins where the snapshot ends.
        initial = table is None and (replication.initial_load or polled)
        schema, describe = resolve_schema(
            sobject, warehouse, salesforce, fresh=config.mode == "resync" or initial, table=table
        )
        if not (config.mode == "resync" or initial):
            refuse_clear_hashes(table, schema)  # `hash:` added to an existing replica: a resync comes first
        # Before anything commits: a history turned on for an existing replica is backfilled through its version.
        history = history_step(sobject, warehouse, schema, replica=table, run_id=run_id, spark=lambda: session(pyspark))
        if config.mode == "resync" or initial:
            sync = resync(
                warehouse,
                salesforce,
                schema,
                run_id=run_id,
                now=now,
                describe=describe,
                page_size=replication.options.bulk_page_size,
                parallel_pages=replication.options.bulk_parallel_pages,
                batch_records=replication.options.resync_batch_records,
                org=org_for_run(warehouse, table, salesforce, sobject.name),
            )
        elif config.mode == FORMULAS:
            if not sobject.formulas:
                raise dg.Failure(
                    f"{sobject.name} keeps no formula fields: add a `formulas` section for it in "
                    "replication.yaml (README 'Formula fields') and reload the code location"
                )
            org_for_run(warehouse, table, salesforce, sobject.name)
            sync = refresh_formulas(
                warehouse,
                salesforce,
                schema,
                options=sobject.formulas,
                run_id=run_id,
                now=now,
                full=config.formulas_full,
                page_size=replication.options.bulk_page_size,
            )
        elif polled or (sobject.mode == "cdc" and (p := poll_state(warehouse, table)) and p.active):
            # The latter: the first run after replication.yaml switched the object from poll to cdc (hand-off).
            org_for_run(warehouse, table, salesforce, sobject.name)
            sync = poll(
                warehouse,
                salesforce,
                schema,
                options=sobject.poll,
                run_id=run_id,
                now=now,
                compare_ids=config.compare_ids,
                confirm_deletes=config.confirm_deletes,
                handoff=not polled,
            )
        elif config.mode == "reconcile":
            org = org_for_run(warehouse, table, salesforce, sobject.name)
            sync = reconcile(warehouse, salesforce, schema, run_id=run_id, now=now, org=org)
        if polled:  # no change events to apply: no Spark either
            return dg.MaterializeResult(
                metadata=record_history(context, history, sobject, warehouse, schema, run_id)
                | replica_metadata(
                    context, sobject, schema, warehouse, polled_result(warehouse, schema.name, sync), sync
                )
            )
        spark = session(pyspark)
        close_after = config.transaction_close_after
        cut = pinned_cut(
            context,
            warehouse,
            replicated=set(replication.names),
            close_after=replication.transaction_close_after if close_after is None else close_after,
        )
        refresh = DescribeRefresh(sobject, warehouse, salesforce)
        # After a sync step (it loads and commits on its own) the snapshot is loaded again.
        result = apply_changes(
            spark,
            warehouse,
            schema,
            cut=cut,
            run_id=run_id,
            now=now,
            description=describe_note(describe),
            refresh_schema=refresh,
            replica=warehouse.table(sobject.name) if sync else table,
            history=sobject.history,
        )
        if refresh.keep():
            result.table = warehouse.table(sobject.name)
        schema = result.schema or schema
        return dg.MaterializeResult(
            metadata=record_history(context, history, sobject, warehouse, schema, run_id)
            | replica_metadata(context, sobject, schema, warehouse, result, sync)
        )

    return replica


def replica_metadata(
    context: dg.AssetExecutionContext,
    sobject: SObjectConfig,
    schema: ObjectSchema,
    warehouse: DeltaWarehouse,
    result: ApplyResult,
    sync: SyncResult | None,
) -> dict:
    c, s = result.counts, result.state
    context.log.info(
        f"{sobject.name}: {c['applied']} changes applied, {c['held']} held (open transaction), "
        f"{c['gaps']} gaps, {c['late']} late, {c['dirty_skipped']} skipped while dirty, {c['overflow']} "
        f"overflow; {c['rows_written']} rows written"
    )
    if s.resync_pending:
        context.log.warning(f"{sobject.name}: full resync pending: {s.resync_pending.reason}")
    table = result.table
    metadata = {
        **{k: dg.MetadataValue.int(v) for k, v in c.items()},
        "mode": dg.MetadataValue.text(sync.mode if sync else "apply"),
        "dagster/row_count": dg.MetadataValue.int(row_count(table)),
        "dagster/column_schema": column_schema(schema),
        META_DELTA_VERSION: dg.MetadataValue.int(table.version() if table is not None else -1),
        META_TABLE_URI: dg.MetadataValue.path(warehouse.uri(sobject.name)),
        META_APPLIED_THROUGH: dg.MetadataValue.int(s.applied_through),
        META_COMMITTED: dg.MetadataValue.bool(result.committed),
        META_DIRTY: dg.MetadataValue.int(dirty_count(table)),
        META_RESYNC: dg.MetadataValue.text(printable(s.resync_pending.reason) if s.resync_pending else ""),
        META_HELD: dg.MetadataValue.json(printable_list(s.held.transactions) if s.held else []),
        META_API_CALLS: dg.MetadataValue.int(sync.api_calls if sync else 0),
        META_UNKNOWN_FIELDS: dg.MetadataValue.json(printable_list(result.unknown_fields)),
        **{f"seconds_{k}": dg.MetadataValue.float(round(v, 3)) for k, v in result.seconds.items()},
    }
    if sync:  # a count both steps report (diffs_applied, diffs_unresolved) is their sum
        metadata |= {k: dg.MetadataValue.int(v + c.get(k, 0)) for k, v in sync.counts.items()}
    if isinstance(sync, PollResult):
        metadata[META_POLL_CURSOR] = dg.MetadataValue.json(sync.cursor.to_dict() if sync.cursor else {})
        metadata[META_POLL_CURSOR_FIELD] = dg.MetadataValue.text(sync.cursor_field or "")
    if sobject.formulas:  # how old the formula values are, whatever the run did (the age grows between refreshes)
        metadata |= formula_metadata(table, datetime.now(UTC))
    if isinstance(sync, FormulaResult):
        metadata |= {k: dg.MetadataValue.float(round(v, 3)) for k, v in sync.seconds.items()}
    if s.last_commit_ts:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(s.last_commit_ts)).total_seconds()
        metadata[META_LAG] = dg.MetadataValue.float(seconds)
    return metadata
