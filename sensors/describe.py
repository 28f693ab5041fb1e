"""describe sensors: one per object whose describe() comes from the org, each requesting a `describe` run of its
replica every `describe_every` (cdc_assets/field_access.py does the work): a field added in the org, or made
readable to the integration user, with values no event carried (a default, a data load before it was readable)
becomes a column backfilled from the org, without waiting for an event to name it or for a resync.

A sensor rather than a schedule, as for polling and formulas (sensors/windowed.py): one run per window, none while
one of the object's runs is queued or in flight, none while it is paused or the API budget is nearly spent. Its
first tick only starts the window count: the sensors start with the platform, whose first runs (an initial load, a
first apply) ask describe() themselves; a describe run per object then would only compete with them.
"""

import time

import dagster as dg

from cdc_assets.actions import DESCRIBE
from cdc_assets.config import ReplicationConfig, SObjectConfig
from cdc_assets.names import replica_key
from resources.salesforce import SalesforceResource
from sensors.windowed import window_request

MAX_TICK_SECONDS = 300  # a long describe_every is still checked this often (a window missed while held back)


def sensor_name(name: str) -> str:
    return f"describe_{name}"


def build_describe_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    reserve = replication.options.api_budget_reserve
    return [
        _describe_sensor(o, o.describe_every, reserve, default_status)
        for o in replication.objects
        if o.describe_every and not o.describe_path
    ]


def _describe_sensor(
    sobject: SObjectConfig, every: float, reserve: float, default_status: dg.DefaultSensorStatus
) -> dg.SensorDefinition:
    name = sobject.name

    @dg.sensor(
        name=sensor_name(name),
        minimum_interval_seconds=max(1, min(int(every), MAX_TICK_SECONDS)),
        default_status=default_status,
        asset_selection=[replica_key(name)],
        description=f"Asks describe() of Salesforce {name} again every {every:g} s: fields added (or made readable) "
        f"become columns backfilled from the org; fields hidden or deleted are marked.",
    )
    def describe_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource) -> dg.SensorResult:
        if context.cursor is None:  # a sensor just started: the replica's own first run asks describe() anyway
            return dg.SensorResult(
                skip_reason=f"the first describe() of {name} is a window away", cursor=str(int(time.time() // every))
            )
        return window_request(
            context,
            salesforce,
            name=name,
            mode=DESCRIBE.name,
            every=every,
            reason=f"describe() every {every:g} s",
            done="describe() already asked",
            reserve=reserve,
        )

    return describe_sensor
