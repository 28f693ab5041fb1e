"""The formulas sensor: one for every object whose replica keeps formula fields (`formulas:` in replication.yaml),
asking for formula refresh runs of their replicas, each every its `refresh_every` (replication/formulas/ does the
work).

A cycle (sensors/cycle.py), as for polling: each tick, one run carrying every object whose refresh window is due
(at most `objects_per_run` a run), none for an object paused or with a run queued or in flight (tag
`cdc/object.<Name>`), none while the org's daily API budget is nearly spent (`api_budget_reserve`). The run key
names the objects and their windows (n = seconds since the epoch // refresh_every), so a tick evaluated twice asks
for the same runs. Whether a run reads every record of an object (a full pass) or those whose SystemModstamp moved
is decided per object by the run from the replica's commits (`full_every`).
"""

import dagster as dg

from cdc_assets.actions import FORMULAS
from replication.config import ReplicationConfig
from sensors.cycle import BACKGROUND, Cycle, build_cycle_sensor

SENSOR_NAME = "formulas_sensor"
MAX_TICK_SECONDS = 300  # a long refresh_every is still checked this often (a window missed while held back)


def build_formula_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    every = {o.name: o.formulas.refresh_every for o in replication.objects if o.formulas}
    if not every:
        return []
    per_run = replication.options.objects_per_run
    cycle = Cycle(
        FORMULAS,
        every=every,
        per_run=per_run,
        reserve=replication.options.api_budget_reserve,
        reason="formula refresh",
        done="refreshed",
        priority=BACKGROUND,
    )
    description = (
        f"Refreshes the formula columns of the {len(every)} Salesforce objects keeping formula fields, each every "
        f"its refresh_every (change events never carry formula fields): one run carries every object due (at most "
        f"{per_run} a run), each a Bulk API 2.0 query of their values, merged into them."
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
