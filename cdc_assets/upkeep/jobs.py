"""The Dagster wiring of upkeep: two jobs on a schedule, whatever the number of objects.

- `upkeep_replicas` compacts and vacuums every replica, and its history table (`history: true`), one table at a
  time (config `objects`: only those). Each table is kept up holding its replica pool's host lock
  (resources/pool_lock.py): a step writing the table waits for it, as it waits for another writer, and starts
  between two tables of the walk. A table whose upkeep fails is named in the log and in the run's failure; the
  walk goes on to the others.
- `upkeep_change_events` retires the landing files it has ingested (landing.py), trims payloads past the retention,
  deletes archived landing files and acknowledged quarantine rows past theirs (retention.py) and vacuums
  `_quarantine`, then compacts and vacuums change_events, in pool `change_events` (one slot: dagster.yaml).

Each table's upkeep is reported as an `AssetObservation` of its asset (`salesforce/<Object>`,
`salesforce_history/<Object>_history`, `change_events`): numeric metadata (files and bytes before/after, files
vacuumed, rows trimmed, seconds), which the UI plots on the asset's page. Runs are tagged mode `upkeep` and, hidden,
`TAG_UPKEEP` (`_change_events`, or `_replicas`). They carry no object tag: a walk of hundreds of tables holds no
object's other runs back, only the one table it is at.

The vacuum is delta-rs's default (lite): it deletes files the log removed, never files the log never named, such as
a resync's stage waiting in the replica's folder (replication/snapshot.py). A full vacuum (delta-rs `full=True`,
Spark's `VACUUM`) of a replica while a resync stage waits would delete the stage's files.
"""

import time
from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from cdc_assets.names import (
    CHANGE_EVENTS_KEY,
    CHANGE_EVENTS_POOL,
    TAG_UPKEEP,
    history_key,
    replica_key,
    replica_pool,
    run_tags,
)
from replication.config import ReplicationConfig, SObjectConfig, UpkeepConfig
from replication.history.stage import history_name
from replication.upkeep.compact import Footprint, compact
from replication.upkeep.landing import retire_landing
from replication.upkeep.retention import prune_archive, prune_quarantine, trim_payloads
from replication.upkeep.vacuum import vacuum
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse
from resources.delta_protocol import ensure_supported
from resources.landing_zone import LandingZone
from resources.pool_lock import exclusive, host_lock

CE_JOB, REPLICAS_JOB = "upkeep_change_events", "upkeep_replicas"
REPLICAS = "_replicas"  # the TAG_UPKEEP of upkeep_replicas' runs (the change_events job's is the table's name)
REPLICA_Z_ORDER, CE_Z_ORDER = ["Id"], ["_ingest_seq"]


def upkeep_table(
    warehouse: DeltaWarehouse,
    name: str,
    settings: UpkeepConfig,
    *,
    replicated: list[str] | None = None,
    now: datetime | None = None,
    landing: LandingZone | None = None,
) -> dict[str, float]:
    """Everything upkeep does to table `name` (change_events only: retire ingested landing files, trim payloads,
    prune the landing archive and `_quarantine`; then compact, then vacuum), as the observation's metadata. Nothing
    when the table does not exist yet."""
    table = warehouse.table(name)
    if table is None:
        return {}
    ensure_supported(table, name)  # upkeep rewrites files too: not in a protocol the readers cannot read
    started = time.perf_counter()
    now = now or datetime.now(UTC)
    before = Footprint.of(table)
    out: dict[str, float] = {"files_before": before.files, "bytes_before": before.bytes}
    if name == CHANGE_EVENTS and landing is not None:
        retired = retire_landing(warehouse, landing, settings)
        assert retired is not None, "None only when change_events does not exist, and it does (read above)"
        out |= {
            "landing_files_retired": retired.files_retired,
            "landing_files_pending": retired.files_pending,
            "archive_files_deleted": prune_archive(landing, days=settings.landing_archive_days, now=now),
        }
    if name == CHANGE_EVENTS:
        trimmed = trim_payloads(
            warehouse, replicated or [], retention_hours=settings.change_events_retention_hours, now=now
        )
        out["rows_trimmed"] = trimmed.rows_trimmed if trimmed else 0
        out["quarantine_rows_deleted"] = prune_quarantine(warehouse, days=settings.quarantine_days, now=now)
        quarantine = vacuum(warehouse, QUARANTINE, retention_hours=settings.vacuum_retention_hours)
        out["quarantine_files_vacuumed"] = quarantine.files_deleted if quarantine else 0
    if settings.compact or settings.z_order:
        z_order = (CE_Z_ORDER if name == CHANGE_EVENTS else REPLICA_Z_ORDER) if settings.z_order else None
        done = compact(warehouse, name, z_order_by=z_order)
        out |= {"files_compacted": done.files_removed, "files_written": done.files_added} if done else {}
    vacuumed = vacuum(warehouse, name, retention_hours=settings.vacuum_retention_hours)
    out["files_vacuumed"] = vacuumed.files_deleted if vacuumed else 0
    after = Footprint.of(warehouse.reloaded(name))
    return out | {
        "files_after": after.files,
        "bytes_after": after.bytes,
        "delta_version": warehouse.reloaded(name).version(),
        "seconds_upkeep": round(time.perf_counter() - started, 3),
    }


def _observed(key: dg.AssetKey, values: dict[str, float], description: str) -> dg.AssetObservation:
    return dg.AssetObservation(
        asset_key=key,
        description=description,
        metadata={
            k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.float(float(v))
            for k, v in values.items()
        },
    )


def _report(context: dg.OpExecutionContext, key: dg.AssetKey, values: dict[str, float]) -> None:
    if not values:
        context.log.info(f"{key.to_user_string()}: no table yet, nothing to keep up")
        return
    summary = (
        f"{key.to_user_string()}: {values['files_before']} -> {values['files_after']} files, "
        f"{values['bytes_before']:,} -> {values['bytes_after']:,} bytes, "
        f"{values['files_vacuumed']} files vacuumed"
        + (
            f", {values['rows_trimmed']} payloads trimmed, {values.get('landing_files_retired', 0)} "
            f"landing files retired"
            if "rows_trimmed" in values
            else ""
        )
    )
    context.log.info(summary)
    context.log_event(_observed(key, values, f"upkeep: {summary}"))


class ReplicasUpkeepConfig(dg.Config):
    objects: list[str] = Field(default_factory=list)  # names as in replication.yaml, e.g. [Account]; empty: all


def _upkeep_replica(
    context: dg.OpExecutionContext, warehouse: DeltaWarehouse, sobject: SObjectConfig, settings: UpkeepConfig
) -> None:
    """One replica and its history (`history: true`: written by the replica's step, so under the same lock), holding
    the replica pool's host lock: no step writing the table runs beside it, and one waiting starts between tables."""
    name = sobject.name
    with host_lock(context.instance, replica_pool(name), context.log):
        _report(context, replica_key(name), upkeep_table(warehouse, name, settings))
        if sobject.history:
            _report(context, history_key(name), upkeep_table(warehouse, history_name(name), settings))


def build_replicas_upkeep_job(*, replication: ReplicationConfig) -> dg.JobDefinition:
    """`upkeep_replicas`: one op walking every replica (or those of config `objects`), one table at a time. One job
    whatever the number of objects: a job per table was thousands of job snapshots in the code location at a
    thousand objects (bench/RESULTS.md, "A thousand objects"). Dagster's pools are fixed per op, so the op takes
    each table's host lock (resources/pool_lock.py) instead of its pool slot."""
    settings = replication.options.upkeep

    @dg.op(
        name=f"{REPLICAS_JOB}_op",
        description="Compact and vacuum each replica and its history, one table at a time, each while no writer "
        "of it runs (its host lock).",
    )
    def upkeep_replicas_op(context: dg.OpExecutionContext, config: ReplicasUpkeepConfig, warehouse: DeltaWarehouse):
        if problem := replication.unknown(config.objects):
            raise dg.Failure(f"{REPLICAS_JOB}: {problem}")
        failed = {}
        for name in config.objects or replication.names:
            try:
                _upkeep_replica(context, warehouse, replication.object(name), settings)
            except Exception as exc:  # noqa: BLE001  one table's trouble stays its own: the others are kept up
                context.log.error(f"upkeep of {name} failed: {type(exc).__name__}: {exc}")
                failed[name] = f"{type(exc).__name__}: {exc}"
        if failed:
            raise dg.Failure(
                f"upkeep failed for {len(failed)} replicas (the others were kept up): "
                + "; ".join(f"{n}: {e}" for n, e in failed.items())
            )

    @dg.job(
        name=REPLICAS_JOB,
        tags=run_tags(mode="upkeep", reason=f"{settings.schedule} schedule", hidden={TAG_UPKEEP: REPLICAS}),
        description="Table upkeep of every replica and its history (config `objects`: only those), one table at a "
        "time (README 'Table upkeep'): compact, vacuum.",
    )
    def upkeep_replicas_job():
        upkeep_replicas_op()

    return upkeep_replicas_job


def build_change_events_upkeep_job(*, replication: ReplicationConfig) -> dg.JobDefinition:
    """`upkeep_change_events`, in the change_events pool."""
    settings = replication.options.upkeep

    @dg.op(
        name=f"{CE_JOB}_op",
        pool=CHANGE_EVENTS_POOL,
        description="Retire ingested landing files, trim payloads past the retention, compact and vacuum "
        "change_events (never beside a writer of it: its pool).",
    )
    @exclusive(CHANGE_EVENTS_POOL)
    def upkeep_change_events_op(context: dg.OpExecutionContext, warehouse: DeltaWarehouse, landing: LandingZone):
        _report(
            context,
            CHANGE_EVENTS_KEY,
            upkeep_table(warehouse, CHANGE_EVENTS, settings, replicated=replication.names, landing=landing),
        )

    @dg.job(
        name=CE_JOB,
        tags=run_tags(mode="upkeep", reason=f"{settings.schedule} schedule", hidden={TAG_UPKEEP: CHANGE_EVENTS}),
        description="Table upkeep of change_events (README 'Table upkeep'): retire ingested landing files, trim "
        "payloads past the retention, compact, vacuum.",
    )
    def upkeep_change_events_job():
        upkeep_change_events_op()

    return upkeep_change_events_job


def build_upkeep(
    *, replication: ReplicationConfig, default_status: dg.DefaultScheduleStatus
) -> tuple[list[dg.JobDefinition], list[dg.ScheduleDefinition]]:
    """The two upkeep jobs (the replicas, change_events) and their schedules (`options.upkeep.schedule`)."""
    jobs = [
        build_replicas_upkeep_job(replication=replication),
        build_change_events_upkeep_job(replication=replication),
    ]
    schedules = [
        dg.ScheduleDefinition(
            name=f"{j.name}_schedule",
            job=j,
            cron_schedule=replication.options.upkeep.schedule,
            default_status=default_status,
        )
        for j in jobs
    ]
    return jobs, schedules
