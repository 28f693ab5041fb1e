"""Dagster assets: the landing zone (external), change_events, and one replica asset per Salesforce object.

The asset functions only wire resources to `ingest`, the run's action (cdc_assets/actions.py) and `apply_changes`;
the logic lives there and in spark_ops.
Metadata keys are module constants so sensors and checks read what assets write.

**What "unsynced" means here.** The ingest step materializes `change_events` (the whole table) and one slice per
object, `events/<Object>_events` (that object's rows of it), whose data version is the last ingest that stored rows
of the object. Each replica depends on its own slice only. Dagster marks an asset unsynced when an upstream data version
differs from the one its latest materialization read, so a replica is unsynced exactly when rows of its object were
ingested after it last applied: not after every landing run that carried other objects' events only (with one
`change_events` upstream it was, since a landing run includes only the replicas its files name). A paused
object's replica is unsynced while its events are ingested, which is true.

**One asset group** (`GROUP`) for everything: the UI draws group boxes, collapsed until opened, only when the graph
has several groups, so the global lineage opens as the graph itself; the key prefixes (`change_events`,
`events/`, `salesforce/`, `changefeed/`) name its layers and are the asset catalog's folders. **A key's last part
says what the asset is** (`Account_events`, `Account` for the replica, `Account_changefeed`, `Account_history`): it
is all the lineage graph and the asset list show of a key. The keys are made in one place, cdc_assets/names.py.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg
from dagster_pyspark import PySparkResource
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_assets.actions import ACTIONS, Action, ActionRun, ReplicaRunConfig, Step, loads_first, run_step
from cdc_assets.checks import NO_FAILED_FILES
from cdc_assets.formulas.freshness import formula_metadata
from cdc_assets.history.assets import history_step, record_history
from cdc_assets.names import (
    CHANGE_EVENTS_KEY,
    CHANGE_EVENTS_POOL,
    GROUP,
    LANDING_ZONE,
    META_API_CALLS,
    META_APPLIED_THROUGH,
    META_COMMITTED,
    META_DELTA_VERSION,
    META_DIRTY,
    META_ENTITY_SEQ,
    META_FAILED_FILES,
    META_FIELD_CATALOG,
    META_FIELDS_EXCLUDED,
    META_HELD,
    META_LAG,
    META_POLL_CURSOR,
    META_POLL_CURSOR_FIELD,
    META_POLL_NEXT,
    META_RESYNC,
    META_RESYNC_DEFERRED,
    META_TABLE_URI,
    META_UNKNOWN_FIELDS,
    TAG_MODE,
    events_key,
    replica_key,
    replica_pool,
)
from cdc_assets.run_cut import pinned_cut
from object_schema.describe import BINARY_REASON, FORMULAS_AT, NAME_REASON, ObjectSchema, spark_type
from replication.apply import ApplyResult, apply_changes
from replication.config import ReplicationConfig, ReplicationOptions, SObjectConfig
from replication.counts import dirty_count, row_count
from replication.damaged import deferred_until
from replication.field_access import FieldAccess, backfill_added, is_invalid_field, settle_field_access
from replication.field_catalog import refresh_field_catalog
from replication.formulas.refresh import FormulaResult
from replication.ingest import IngestRun, ingest
from replication.poll.run import PollResult, polled_result
from replication.records import ValueDoesNotFit
from replication.run import ApplyRun
from replication.schemas import DescribeRefresh, SchemaCatalog, describe_note, refuse_clear_hashes, resolve_schema
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.pool_lock import exclusive
from resources.printable import printable, printable_list
from resources.salesforce import SalesforceApiError, SalesforceResource
from resources.spark import session

KINDS = {"spark", "delta", "salesforce"}
FILES_SHOWN = 20  # landing file names in a change_events materialization (the count is `files`)
META_LISTED = 20  # file names a log or metadata entry lists at most (the table has them all)


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
            IngestRun(
                session(pyspark),
                warehouse,
                landing,
                schemas,
                run_id=context.run.run_id,
                max_text=replication.options.max_ingest_batch_bytes,
                max_change_bytes=replication.options.max_ingest_batch_change_bytes,
            )
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
        tags={TAG_MODE: sobject.source},
        # How old its latest materialization may get (replication.yaml `freshness`): the UI marks it stale past it.
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(seconds=replication.freshness_of(sobject))
        ),
        description=replica_description(sobject),
    )
    @exclusive(replica_pool(sobject.name))
    def replica(
        context: dg.AssetExecutionContext,
        config: ReplicaRunConfig,
        pyspark: PySparkResource,
        warehouse: DeltaWarehouse,
        salesforce: SalesforceResource,
    ) -> dg.MaterializeResult:
        action = ACTIONS[config.mode]
        run, access, initial = open_run(context, sobject, replication, config, warehouse, salesforce)
        # Before anything commits: a history turned on for an existing replica is backfilled through its version.
        history = history_step(
            sobject, warehouse, run.schema, replica=run.table, run_id=run.run_id, spark=lambda: session(pyspark)
        )
        run, access, step = step_meeting_describe(context, action, run, access, initial=initial)
        if action.applies_events_to(sobject):
            result, access = apply_and_backfill(context, run, session(pyspark), step, access, replication.names)
        else:  # no change events to apply: no Spark either
            result = polled_result(warehouse, sobject.name, step.sync)
        schema = result.schema or run.schema
        return dg.MaterializeResult(
            metadata=record_history(context, history, sobject, warehouse, schema, run.run_id)
            | replica_metadata(context, sobject, schema, warehouse, result, step, run.options)
            | field_access_metadata(access)
            | catalog_metadata(context, warehouse, schema, result.table)
        )

    return replica


def open_run(
    context: dg.AssetExecutionContext,
    sobject: SObjectConfig,
    replication: ReplicationConfig,
    config: ReplicaRunConfig,
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource,
) -> tuple[ActionRun, FieldAccess, bool]:
    """The run of one replica step in the action of its `config`: its snapshot (loaded once and handed to each step that reads it; a step that
    commits moves it), its schema, describe() asked anew for a full copy and what changed settled (fields the org no
    longer serves are kept, never asked for); with what describe() says of each field, and whether the step is the
    initial load."""
    action, table = ACTIONS[config.mode], warehouse.table(sobject.name)
    initial = loads_first(action, sobject, table, replication.options)
    full_copy = initial or action.full_copy
    schema, describe = resolve_schema(sobject, warehouse, salesforce, fresh=full_copy, table=table)
    run = ActionRun(
        sobject=sobject,
        options=replication.options,
        config=config,
        warehouse=warehouse,
        salesforce=salesforce,
        schema=schema,
        describe=describe,
        table=table,
        run_id=context.run.run_id,
        now=datetime.now(UTC),
    )
    run, access = settle_field_access(run, fresh=full_copy, force=action.asks_describe)
    if not full_copy:
        refuse_clear_hashes(run.table, run.schema)  # `hash:` added to an existing replica: a resync comes first
    return run, access, initial


def step_meeting_describe(
    context: dg.AssetExecutionContext, action: Action, run: ActionRun, access: FieldAccess, *, initial: bool
) -> tuple[ActionRun, FieldAccess, Step]:
    """The action's step (`run_step`). A field the org no longer serves, or serves with another type, fails it: then
    describe() is asked again, the column marked or rewritten (replication/field_access.py, retype.py), and the org
    read again, once."""
    try:
        return run, access, run_step(action, run, initial=initial)
    except (SalesforceApiError, ValueDoesNotFit) as exc:
        if not (isinstance(exc, ValueDoesNotFit) or is_invalid_field(exc)):
            raise
        context.log.warning(f"{run.sobject.name}: {exc}; asking describe() again")
    run, access = settle_field_access(run, force=True)
    return run, access, run_step(action, run, initial=initial)


def apply_and_backfill(
    context: dg.AssetExecutionContext,
    run: ActionRun,
    spark: SparkSession,
    step: Step,
    access: FieldAccess,
    replicated: list[str],
) -> tuple[ApplyResult, FieldAccess]:
    """The apply step after the action's (`apply_step`), then the columns it added (events set new fields)
    backfilled from the org; with what describe() says of each field after it."""
    warehouse, sobject = run.warehouse, run.sobject
    # After a sync step (it loads and commits on its own) the snapshot is loaded again.
    replica = warehouse.table(sobject.name) if step.sync else run.table
    columns = {f.name for f in replica.schema().fields} if replica is not None else None  # a merge moves it
    result = apply_step(context, run, spark, replicated=replicated, replica=replica)
    if not result.committed:
        return result, access
    schema = result.schema or run.schema
    added = backfill_added(sobject, warehouse, run.salesforce, schema, columns, access, run_id=run.run_id, now=run.now)
    if added != access:
        result.table = warehouse.table(sobject.name)
    return result, added


def catalog_metadata(
    context: dg.AssetExecutionContext, warehouse: DeltaWarehouse, schema: ObjectSchema, table: DeltaTable | None
) -> dict:
    """The field catalog `<Object>__fields`, rewritten if describe() changed (replication/field_catalog.py), and the
    describe() fields never replicated, with why (`fields_excluded`: the binary ones, and those whose name is no
    API name, escaped: the org chose that text)."""
    catalog = refresh_field_catalog(warehouse, schema, table)
    for name in schema.unnamed:
        context.log.warning(f"{schema.name}: describe() field {printable(name)} is {NAME_REASON}")
    why = dict.fromkeys(schema.binary, BINARY_REASON) | dict.fromkeys(map(printable, schema.unnamed), NAME_REASON)
    excluded = {META_FIELDS_EXCLUDED: dg.MetadataValue.json(why)} if why else {}
    return excluded | ({META_FIELD_CATALOG: dg.MetadataValue.path(catalog.table_uri)} if catalog is not None else {})


def replica_description(sobject: SObjectConfig) -> str:
    """The replica asset's description, as the UI shows it: what the table holds and the run actions it has."""
    return (
        f"Replica of Salesforce {sobject.name}: one row per record id ever seen, kept current from "
        f"Change Data Capture. Soft deletes (_sf_deleted); dirty rows (_sf_dirty_since) await "
        f"reconciliation. Modes: {', '.join(f'{a.name} ({a.summary})' for a in ACTIONS.values())}. This "
        f"object: {sobject.source}."
    )


def apply_step(
    context: dg.AssetExecutionContext,
    run: ActionRun,
    spark: SparkSession,
    *,
    replicated: list[str],
    replica: DeltaTable | None,
) -> ApplyResult:
    """The change events of the run's cut (decided once a run for the `replicated` objects, cdc_assets/run_cut.py)
    applied to the replica snapshot `replica` (replication/apply.py), with describe() asked again if events set
    unknown fields."""
    close_after = run.config.transaction_close_after
    cut = pinned_cut(
        context,
        run.warehouse,
        replicated=set(replicated),
        close_after=run.options.transaction_close_after if close_after is None else close_after,
    )
    refresh = DescribeRefresh(run.sobject, run.warehouse, run.salesforce)
    applying = ApplyRun(
        spark, run.warehouse, run.schema, run_id=run.run_id, now=run.now, refresh=refresh, history=run.sobject.history
    )
    result = apply_changes(applying, cut=cut, description=describe_note(run.describe), replica=replica)
    if refresh.keep():
        result.table = run.warehouse.table(run.sobject.name)
    return result


def field_access_metadata(access: FieldAccess) -> dict[str, dg.MetadataValue]:
    """Materialization metadata: the hidden and removed columns, and what came back."""
    return {
        "fields_hidden": dg.MetadataValue.json(access.hidden),
        "fields_removed": dg.MetadataValue.json(access.removed),
        "fields_retyped": dg.MetadataValue.json(access.retyped),
        "fields_recreated": dg.MetadataValue.json(access.recreated),
        "fields_backfilled": dg.MetadataValue.json([*access.returned, *access.added]),
        "fields_added": dg.MetadataValue.json(access.added),
        "field_backfill_rows": dg.MetadataValue.int(access.backfilled),
    }


def replica_metadata(
    context: dg.AssetExecutionContext,
    sobject: SObjectConfig,
    schema: ObjectSchema,
    warehouse: DeltaWarehouse,
    result: ApplyResult,
    step: Step,
    options: ReplicationOptions,
) -> dict:
    c, s, sync = result.counts, result.state, step.sync
    deferred = deferred_until(s, options.damaged_resync_every, datetime.now(UTC))
    context.log.info(
        f"{sobject.name}: {c['applied']} changes applied, {c['held']} held (open transaction), "
        f"{c['gaps']} gaps, {c['late']} late, {c['dirty_skipped']} skipped while dirty, {c['overflow']} "
        f"overflow; {c['rows_written']} rows written"
    )
    if s.resync_pending:
        later = f" (deferred until {deferred.isoformat()}: damaged landing files only)" if deferred else ""
        context.log.warning(f"{sobject.name}: full resync pending: {s.resync_pending.reason}{later}")
    table = result.table
    metadata = {
        **{k: dg.MetadataValue.int(v) for k, v in c.items()},
        "mode": dg.MetadataValue.text(step.mode),
        "dagster/row_count": dg.MetadataValue.int(row_count(table)),
        "dagster/column_schema": column_schema(schema),
        META_DELTA_VERSION: dg.MetadataValue.int(table.version() if table is not None else -1),
        META_TABLE_URI: dg.MetadataValue.path(warehouse.uri(sobject.name)),
        META_APPLIED_THROUGH: dg.MetadataValue.int(s.applied_through),
        META_COMMITTED: dg.MetadataValue.bool(result.committed),
        META_DIRTY: dg.MetadataValue.int(dirty_count(table)),
        META_RESYNC: dg.MetadataValue.text(printable(s.resync_pending.reason) if s.resync_pending else ""),
        META_RESYNC_DEFERRED: dg.MetadataValue.text(deferred.isoformat() if deferred else ""),
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
        metadata[META_POLL_NEXT] = dg.MetadataValue.json(sync.next)
    if sobject.formulas:  # how old the formula values are, whatever the run did (the age grows between refreshes)
        metadata |= formula_metadata(table, datetime.now(UTC))
    if isinstance(sync, FormulaResult):
        metadata |= {k: dg.MetadataValue.float(round(v, 3)) for k, v in sync.seconds.items()}
    if s.last_commit_ts:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(s.last_commit_ts)).total_seconds()
        metadata[META_LAG] = dg.MetadataValue.float(seconds)
    return metadata
