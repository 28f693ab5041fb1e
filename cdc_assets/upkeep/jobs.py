"""The Dagster wiring of upkeep: one job per table, its op in that table's pool, on a schedule.

`upkeep_<Object>` compacts and vacuums replica `<Object>`, and its history table (`history: true`: written by the
replica's step, so in the same pool), in pool `replica_<Object>`; `upkeep_change_events` retires the landing files
it has ingested (landing.py), trims payloads past the retention, deletes archived landing files and acknowledged
quarantine rows past theirs (retention.py) and vacuums `_quarantine`, then compacts and vacuums change_events, in
pool `change_events`. With one slot per pool (dagster.yaml) an upkeep step never runs beside a
step writing the same table: it waits for the slot like any writer. Each reports what it did as an
`AssetObservation` of the table's asset (`salesforce/<Object>`, `salesforce_history/<Object>_history`,
`change_events`): numeric metadata (files and bytes before/after, files vacuumed, rows trimmed, seconds), which the
UI plots on the asset's page. Jobs are tagged mode `upkeep` and, hidden, `TAG_UPKEEP=<table>`.

The vacuum is delta-rs's default (lite): it deletes files the log removed, never files the log never named, such as
a resync's stage waiting in the replica's folder (replication/snapshot.py). A full vacuum (delta-rs `full=True`,
Spark's `VACUUM`) of a replica while a resync stage waits would delete the stage's files.
"""

import time
from datetime import UTC, datetime

import dagster as dg

from cdc_assets.names import (
    CHANGE_EVENTS_KEY,
    CHANGE_EVENTS_POOL,
    TAG_UPKEEP,
    history_key,
    replica_key,
    replica_pool,
    run_tags,
)
from replication.config import ReplicationConfig, UpkeepConfig
from replication.history.stage import history_name
from replication.upkeep.compact import Footprint, compact
from replication.upkeep.landing import retire_landing
from replication.upkeep.retention import prune_archive, prune_quarantine, trim_payloads
from replication.upkeep.vacuum import vacuum
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse
from resources.delta_protocol import ensure_supported
from resources.landing_zone import LandingZone
from resources.pool_lock import exclusive

CE_JOB = "upkeep_change_events"
REPLICA_Z_ORDER, CE_Z_ORDER = ["Id"], ["_ingest_seq"]


def upkeep_job_name(name: str) -> str:
    return CE_JOB if name == CHANGE_EVENTS else f"upkeep_{name}"


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


def build_upkeep_job(*, name: str, replication: ReplicationConfig) -> dg.JobDefinition:
    """The upkeep job of one table (`name`: an object, or `_change_events`)."""
    is_ce = name == CHANGE_EVENTS
    key = CHANGE_EVENTS_KEY if is_ce else replica_key(name)
    job_name = upkeep_job_name(name)
    settings = replication.options.upkeep
    with_history = not is_ce and replication.object(name).history

    pool = CHANGE_EVENTS_POOL if is_ce else replica_pool(name)

    @dg.op(
        name=f"{job_name}_op",
        pool=pool,
        description=f"Trim, compact and vacuum {key.to_user_string()} (never beside a writer of it: its pool).",
    )
    @exclusive(pool)
    def upkeep_op(context: dg.OpExecutionContext, warehouse: DeltaWarehouse, landing: LandingZone) -> None:
        values = upkeep_table(
            warehouse, name, settings, replicated=replication.names, landing=landing if is_ce else None
        )
        _report(context, key, values)
        if with_history:  # written by the replica's step, in the same pool: kept up with it
            _report(context, history_key(name), upkeep_table(warehouse, history_name(name), settings))

    @dg.job(
        name=job_name,
        tags=run_tags(
            mode="upkeep",
            reason=f"{settings.schedule} schedule",
            objects=[] if is_ce else [name],
            hidden={TAG_UPKEEP: name},
        ),
        description=f"Table upkeep of {key.to_user_string()} (README 'Table upkeep'): "
        + ("retire ingested landing files, trim payloads past the retention, " if is_ce else "")
        + "compact, vacuum.",
    )
    def upkeep_job():
        upkeep_op()

    return upkeep_job


def build_upkeep(
    *, replication: ReplicationConfig, default_status: dg.DefaultScheduleStatus
) -> tuple[list[dg.JobDefinition], list[dg.ScheduleDefinition]]:
    """Every upkeep job (each replica, change_events) and its schedule (`options.upkeep.schedule`)."""
    jobs = [build_upkeep_job(name=n, replication=replication) for n in [*replication.names, CHANGE_EVENTS]]
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
