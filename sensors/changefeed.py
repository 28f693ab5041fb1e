"""changefeed_sensor: after a replica materializes, export its changefeed (cdc_assets/changefeed/export.py).

Every materialization of `salesforce/<Object>` newer than the latest one of `changefeed/<Object>` makes the feed
due, whether or not the replica changed: the export then writes at least a resolved heartbeat, which is what
tells consumers that nothing happened. One run exports every due feed; its run key names the replica
materializations it answers (their event-log storage ids), so a tick evaluated twice requests one run, and a failed
export is requested again by the replica's next materialization. The exporter is idempotent, so an extra run
only rewrites `resolved.json`.
"""


import dagster as dg

from cdc_assets.assets import replica_key
from cdc_assets.changefeed.export import changefeed_key
from cdc_assets.config import ReplicationConfig

SENSOR_NAME = "changefeed_sensor"


def _latest_storage_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int:
    records = instance.fetch_materializations(key, limit=1, ascending=False).records
    return records[0].storage_id if records else -1


def build_changefeed_sensors(*, replication: ReplicationConfig,
                             default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
                             ) -> list[dg.SensorDefinition]:
    names = [o.name for o in replication.objects if o.changefeed is not None]
    if not names:
        return []

    @dg.sensor(name=SENSOR_NAME, minimum_interval_seconds=15, default_status=default_status,
               asset_selection=[changefeed_key(n) for n in names],
               description="Exports the changefeed of every replica materialized since its feed's last export "
                           "(changes, or a resolved heartbeat when nothing changed).")
    def changefeed_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        due = {}
        for name in names:
            replica = _latest_storage_id(context.instance, replica_key(name))
            if replica > _latest_storage_id(context.instance, changefeed_key(name)):
                due[name] = replica
        if not due:
            return dg.SensorResult(skip_reason="nothing to do: every feed is newer than its replica")
        run_key = "changefeed:" + ",".join(f"{n}@{s}" for n, s in sorted(due.items()))
        return dg.SensorResult(run_requests=[dg.RunRequest(
            run_key=run_key, asset_selection=[changefeed_key(n) for n in sorted(due)],
            tags={"cdc/mode": "changefeed"})])

    return [changefeed_sensor]
