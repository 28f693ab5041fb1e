"""One run of one object per time window: the tick the poll and formula sensors share (sensors/poll.py,
sensors/formulas.py).

The run key names the window (`<mode>-<Object>-<n>`, n = seconds since the epoch // `every`), so a tick evaluated
twice requests one run. No run while the object is paused, while one of its runs is queued or in flight (its hidden
object tag, which every run carries: cdc_assets/names.py), or while the org's daily API budget is nearly spent
(`api_budget_reserve`).
"""

import time

import dagster as dg

from cdc_assets.actions import ACTIONS
from cdc_assets.names import replica_key, run_tags
from cdc_assets.operate.pause import paused_objects
from resources.salesforce import SalesforceResource
from sensors.budget import budget_hold_back
from sensors.work import in_flight, mode_run_config


def window_request(
    context: dg.SensorEvaluationContext,
    salesforce: SalesforceResource,
    *,
    name: str,
    mode: str,
    every: float,
    reason: str,
    done: str,
    reserve: float,
) -> dg.SensorResult:
    """This window's run of `name` in `mode`, or why not (`done`: what a run of this window has done, for the skip
    reason)."""
    window = int(time.time() // every)
    if context.cursor == str(window):
        return dg.SensorResult(skip_reason=f"{name} {done} in this {every:g} s window")
    if paused_objects(context.instance, [name]):
        return dg.SensorResult(skip_reason=f"{name} is paused (resume_replication resumes it)")
    if in_flight(context.instance, name):
        return dg.SensorResult(skip_reason=f"a run of {name} is queued or in flight")
    if ACTIONS[mode].api_budget and (hold := budget_hold_back(salesforce, reserve)):
        return dg.SensorResult(skip_reason=hold)
    request = dg.RunRequest(
        run_key=f"{mode}-{name}-{window}",
        asset_selection=[replica_key(name)],
        run_config=mode_run_config({name: mode}),
        tags=run_tags(mode=mode, reason=reason, objects=[name]),
    )
    return dg.SensorResult(run_requests=[request], cursor=str(window))
