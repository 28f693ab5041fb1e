"""The automation condition sensor: what evaluates the changefeeds' declarative automation.

A changefeed is not started by an external event: it simply follows its replica, so it carries an
`AutomationCondition` (`FOLLOWS_REPLICA`, cdc_assets/changefeed/export.py: after each replica materialization whose
blocking checks passed) and Dagster's asset daemon evaluates it. Conditions are evaluated only by a sensor of the
automation kind; Dagster would make one, `default_automation_condition_sensor`, stopped until someone starts it in
the UI. This module defines it instead, under the same name and over the same assets (every asset with a
condition), so it starts with the other sensors (`CDC_SENSORS_RUNNING=1`: the demo, the end-to-end stack) and its
runs carry the platform's tags (cdc_assets/names.py). Every replica due in one evaluation is exported in one run.
A failed export is asked again after the replica's next materialization, and every five minutes while it stays
failed (`RETRY_CRON`); the exporter is idempotent, so a retry exports what the failed run did not.
"""

import dagster as dg

from cdc_assets.names import run_tags
from replication.config import ReplicationConfig

SENSOR_NAME = "default_automation_condition_sensor"  # Dagster's own name for it (it then makes none of its own)
MODE_CHANGEFEED = "changefeed"
INTERVAL_SECONDS = 15


def build_automation_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    if not any(o.changefeed is not None for o in replication.objects):
        return []
    return [
        dg.AutomationConditionSensorDefinition(
            SENSOR_NAME,
            target=dg.AssetSelection.all(),
            default_status=default_status,
            minimum_interval_seconds=INTERVAL_SECONDS,
            run_tags=run_tags(mode=MODE_CHANGEFEED, reason="replica materialized, its blocking checks passed"),
            description="Evaluates the assets' automation conditions: exports the changefeed of each replica "
            "materialized since its last export whose blocking checks passed.",
        )
    ]
