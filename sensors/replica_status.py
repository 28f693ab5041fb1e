"""replica_status_sensor: per object an observation of its replica asset with `lag_seconds`, `dirty_records`,
`last_error`, `api_calls_today` (the object's own runs) and the org's `api_used_today` / `api_limit`
(Sforce-Limit-Info), and `paused`; numbers plot on the asset page.
"""

import time
from collections.abc import Mapping
from datetime import UTC, datetime

import dagster as dg

from cdc_assets.names import META_API_CALLS, META_DIRTY, META_LAG, META_LAST_ERROR, META_PAUSED, object_tag, replica_key
from cdc_assets.operate.pause import paused_objects
from replication.config import ReplicationConfig
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource

STATUS_SENSOR = "replica_status_sensor"
STATUS_BATCH = 50  # objects the status sensor observes a tick (in turn: each every ceil(N / 50) ticks)


def _today_start() -> float:
    now = datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def _number(metadata: Mapping[str, dg.MetadataValue], key: str) -> float:
    """A count or measure a materialization reported (`dg.MetadataValue.int` / `.float`); 0 when it has none."""
    value = metadata[key].value if key in metadata else 0
    assert isinstance(value, int | float), f"materialization metadata {key} is {value!r}, not a number"
    return value


def api_calls_today(instance: dg.DagsterInstance, name: str, limit: int = 500) -> int:
    """API calls the object's materializations reported since 00:00 UTC (metadata `api_calls`)."""
    since, total = _today_start(), 0
    for record in instance.fetch_materializations(replica_key(name), limit=limit).records:
        if record.timestamp < since:
            break
        materialization = record.asset_materialization
        assert materialization is not None, "a materialization record holds its materialization"
        total += int(_number(materialization.metadata, META_API_CALLS))
    return total


def last_error(instance: dg.DagsterInstance, name: str) -> str:
    """The newest failed run of the object, if it failed after its last materialization: `<run id>: <message>`."""
    failed = instance.get_run_records(
        filters=dg.RunsFilter(tags={object_tag(name): "1"}, statuses=[dg.DagsterRunStatus.FAILURE]), limit=1
    )
    if not failed:
        return ""
    latest = instance.get_latest_materialization_event(replica_key(name))
    record = failed[0]
    ended = record.end_time or record.update_timestamp.timestamp()
    if latest is not None and latest.timestamp > ended:
        return ""
    failures = instance.all_logs(record.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    message = next(
        (
            e.dagster_event.step_failure_data.error.message.strip()
            for e in failures
            if e.dagster_event and e.dagster_event.step_failure_data.error
        ),
        "run failed",
    )
    return f"{record.dagster_run.run_id[:8]}: {message[:500]}"


def status_of(
    instance: dg.DagsterInstance, warehouse: DeltaWarehouse, name: str, *, paused: bool, usage: dict[str, int]
) -> dict[str, dg.MetadataValue]:
    event = instance.get_latest_materialization_event(replica_key(name))
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    # The lag the last materialization reported, aged since: every commit that moves the replica's newest applied
    # change materializes it, so no table load is needed (~0.1 s each, times hundreds of objects a tick).
    lag = _number(meta, META_LAG) + max(time.time() - event.timestamp, 0.0) if event and META_LAG in meta else 0.0
    return {
        META_LAG: dg.MetadataValue.float(round(lag, 1)),
        META_DIRTY: dg.MetadataValue.int(int(_number(meta, META_DIRTY))),
        META_LAST_ERROR: dg.MetadataValue.text(last_error(instance, name)),
        "api_calls_today": dg.MetadataValue.int(api_calls_today(instance, name)),
        "api_used_today": dg.MetadataValue.int(usage.get("used", 0)),
        "api_limit": dg.MetadataValue.int(usage.get("limit", 0)),
        META_PAUSED: dg.MetadataValue.bool(paused),
    }


def build_status_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus, interval: int = 60
) -> dg.SensorDefinition:
    @dg.sensor(
        name=STATUS_SENSOR,
        minimum_interval_seconds=interval,
        default_status=default_status,
        description="Per replicated object, an observation of its replica: lag, dirty records, last error, "
        "API calls today (its runs, and the org's budget used), paused. Plots on each asset page.",
    )
    def replica_status_sensor(
        context: dg.SensorEvaluationContext, warehouse: DeltaWarehouse, salesforce: SalesforceResource
    ) -> dg.SensorResult:
        paused = paused_objects(context.instance, replication.names)
        usage = salesforce.api_usage()
        # At most STATUS_BATCH objects a tick, in turn (the cursor: where the next tick starts), so a tick's cost
        # does not follow the number of objects replicated.
        names = replication.names
        start = int(context.cursor or 0) % max(len(names), 1)
        batch = (names[start:] + names[:start])[:STATUS_BATCH]
        events = [
            dg.AssetObservation(
                asset_key=replica_key(n),
                description="replica status",
                metadata=status_of(context.instance, warehouse, n, paused=n in paused, usage=usage),
            )
            for n in batch
        ]
        return dg.SensorResult(asset_events=events, cursor=str((start + len(batch)) % max(len(names), 1)))

    return replica_status_sensor
