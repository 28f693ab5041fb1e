"""poll sensors: one per `source: poll` object in replication.yaml, each requesting a poll run of its replica every
`poll_interval` seconds (cdc_assets/poll/ does the work).

A sensor rather than a schedule, so that each tick can decide like the reconciliation sensor does: no run while one
of the object's runs is queued or in flight (its hidden object tag, which every run carries: cdc_assets/names.py), and none while the
org's daily API budget is nearly spent (`api_budget_reserve`, as for reconciliation). The run key names the poll
window (`poll-<Object>-<n>`, n = seconds since the epoch // interval), so a tick evaluated twice requests one run.
Runs are tagged `cdc/mode=poll`; whether the run also compares Ids with the org (hard deletes) is decided by the run
from the replica's own commit state (`hard_delete_check_every`).
"""

import dagster as dg

from cdc_assets.actions import POLL
from cdc_assets.config import POLL_SOURCE, ReplicationConfig, SObjectConfig
from cdc_assets.names import replica_key
from resources.salesforce import SalesforceResource
from sensors.windowed import window_request


def sensor_name(name: str) -> str:
    return f"poll_{name}"


def build_poll_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    reserve = replication.options.api_budget_reserve
    return [_poll_sensor(o, reserve, default_status) for o in replication.objects if o.source == POLL_SOURCE]


def _poll_sensor(sobject: SObjectConfig, reserve: float, default_status: dg.DefaultSensorStatus) -> dg.SensorDefinition:
    name, interval = sobject.name, sobject.poll.interval

    @dg.sensor(
        name=sensor_name(name),
        minimum_interval_seconds=max(1, int(interval)),
        default_status=default_status,
        asset_selection=[replica_key(name)],
        description=f"Polls Salesforce {name} (no Change Data Capture) every {interval:g} s: records changed "
        f"since the cursor kept in the replica's Delta commits.",
    )
    def poll_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource) -> dg.SensorResult:
        return window_request(
            context,
            salesforce,
            name=name,
            mode=POLL.name,
            every=interval,
            reason=f"poll every {interval:g} s",
            done="already polled",
            reserve=reserve,
        )

    return poll_sensor
