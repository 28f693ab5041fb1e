"""The describe sensor: one for every object whose describe() comes from the org, asking for `describe` runs of
their replicas, each every its `describe_every` (replication/field_access.py does the work): a field added in the
org, or made readable to the integration user, with values no event carried (a default, a data load before it was
readable) becomes a column backfilled from the org, without waiting for an event to name it or for a resync.

A cycle (sensors/cycle.py), as for polling: each tick, one run carrying every object whose window is due (at most
`objects_per_run` a run), none for an object paused or with a run queued or in flight, none while the API budget is
nearly spent. An object's first window only starts its count: the sensor starts with the platform, whose first
runs (an initial load, a first apply) ask describe() themselves; a describe run then would only compete with them.
"""

import dagster as dg

from cdc_assets.actions import DESCRIBE
from replication.config import ReplicationConfig
from sensors.cycle import BACKGROUND, Cycle, build_cycle_sensor

SENSOR_NAME = "describe_sensor"
MAX_TICK_SECONDS = 300  # a long describe_every is still checked this often (a window missed while held back)


def build_describe_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    every = {o.name: o.describe_every for o in replication.objects if o.describe_every and not o.describe_path}
    if not every:
        return []
    per_run = replication.options.objects_per_run
    cycle = Cycle(
        DESCRIBE,
        every=every,
        per_run=per_run,
        reserve=replication.options.api_budget_reserve,
        reason="describe() again",
        done="described",
        first_waits=True,
        priority=BACKGROUND,
    )
    description = (
        f"Asks describe() again for the {len(every)} Salesforce objects whose describe() comes from the org, each "
        f"every its describe_every: one run carries every object due (at most {per_run} a run). Fields added (or "
        f"made readable) become columns backfilled from the org; fields hidden or deleted are marked."
    )
    return [
        build_cycle_sensor(
            name=SENSOR_NAME,
            cycle=cycle,
            description=description,
            max_tick_seconds=MAX_TICK_SECONDS,
            default_status=default_status,
        )
    ]
