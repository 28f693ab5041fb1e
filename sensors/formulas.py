"""formulas sensors: one per object whose replica keeps formula fields (`formulas:` in replication.yaml), each
requesting a formula refresh run of its replica every `refresh_every` (cdc_assets/formulas/ does the work).

A sensor rather than a schedule, as for polling (sensors/poll.py): no run while one of the object's runs is queued
or in flight (tag `cdc/object.<Name>`), none while the object is paused, and none while the org's daily API budget
is nearly spent (`api_budget_reserve`). The run key names the refresh window (`formulas-<Object>-<n>`, n = seconds
since the epoch // refresh_every), so a tick evaluated twice requests one run. Whether the run reads every record
(a full pass) or those whose SystemModstamp moved is decided by the run from the replica's commits (`full_every`).
"""

import dagster as dg

from cdc_assets.actions import FORMULAS
from cdc_assets.config import ReplicationConfig, SObjectConfig
from cdc_assets.names import replica_key
from resources.salesforce import SalesforceResource
from sensors.windowed import window_request

MAX_TICK_SECONDS = 300  # a long refresh_every is still checked this often (a window missed while held back)


def sensor_name(name: str) -> str:
    return f"formulas_{name}"


def build_formula_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    reserve = replication.options.api_budget_reserve
    return [_formula_sensor(o, reserve, default_status) for o in replication.objects if o.formulas]


def _formula_sensor(
    sobject: SObjectConfig, reserve: float, default_status: dg.DefaultSensorStatus
) -> dg.SensorDefinition:
    assert sobject.formulas is not None, "build_formula_sensors builds one only for an object with formulas"
    name, every = sobject.name, sobject.formulas.refresh_every

    @dg.sensor(
        name=sensor_name(name),
        minimum_interval_seconds=max(1, min(int(every), MAX_TICK_SECONDS)),
        default_status=default_status,
        asset_selection=[replica_key(name)],
        description=f"Refreshes the formula columns of Salesforce {name} every {every:g} s (change events "
        f"never carry formula fields): a Bulk API 2.0 query of their values, merged into them.",
    )
    def formulas_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource) -> dg.SensorResult:
        return window_request(
            context,
            salesforce,
            name=name,
            mode=FORMULAS.name,
            every=every,
            reason=f"formula refresh every {every:g} s",
            done="formulas already refreshed",
            reserve=reserve,
        )

    return formulas_sensor
