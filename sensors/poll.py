"""The poll sensor: one for every `source: poll` object of replication.yaml, asking for the poll runs that are due
(cdc_assets/poll/ does the work).

An org may poll hundreds of objects, so the sensor plans a **poll cycle**, not a run per object: each tick it takes
the objects whose window is due (one window per `poll_interval` of each object: n = seconds since the epoch //
interval, kept per object in the sensor's cursor) and asks for one run carrying them all, or a few of at most
`poll_objects_per_run` each. A run is a process of its own with a fixed cost (~11 s on two cores,
bench/RESULTS.md), paid once per cycle instead of once per object; its replica steps run one after the other in it
(the in-process executor), each reading only its own object's changes and committing on its own, so one object's
failure fails its step and leaves the others' commits (its window is asked again by the next tick after it, with
the run's retry).

What it skips, as the reconciliation sensor does: an object that is paused, or one whose run (any run: its hidden
object tag) is queued or in flight (found with one query of the in-flight runs, whatever the number of objects),
and every object while the org's daily API budget is nearly spent (`api_budget_reserve`). The run key names the
objects and their windows, so a tick evaluated twice asks for the same runs. Runs are tagged `cdc/mode=poll`;
whether a run also compares Ids with the org (hard deletes) is decided per object by the run from the replica's own
commit state (`hard_delete_check_every`).
"""

import hashlib
import json
import time

import dagster as dg

from cdc_assets.actions import POLL
from cdc_assets.config import POLL_SOURCE, ReplicationConfig, SObjectConfig
from cdc_assets.names import objects_of_tags, replica_key, run_tags
from cdc_assets.operate.pause import paused_objects
from resources.salesforce import SalesforceResource
from sensors.budget import budget_hold_back
from sensors.work import IN_FLIGHT, mode_run_config

SENSOR_NAME = "poll_sensor"
MAX_TICK_SECONDS = 60  # a long poll_interval is still checked this often (a window missed while held back)


def build_poll_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    polled = [o for o in replication.objects if o.source == POLL_SOURCE]
    if not polled:
        return []
    reserve, per_run = replication.options.api_budget_reserve, replication.options.poll_objects_per_run
    tick = max(1, min(int(min(o.poll.interval for o in polled)), MAX_TICK_SECONDS))

    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=tick,
        default_status=default_status,
        asset_selection=[replica_key(o.name) for o in polled],
        description=f"Polls the {len(polled)} Salesforce objects without Change Data Capture, each every its "
        f"poll_interval: one run carries every object due (at most {per_run} a run), each reading the records "
        f"changed since the cursor kept in its replica's Delta commits.",
    )
    def poll_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource) -> dg.SensorResult:
        return poll_cycle(context, salesforce, polled, reserve=reserve, per_run=per_run)

    return [poll_sensor]


def window(sobject: SObjectConfig, now: float) -> int:
    return int(now // sobject.poll.interval)


def objects_in_flight(instance: dg.DagsterInstance) -> set[str]:
    """The objects of every run queued or in flight (their hidden object tags), from one query."""
    return {
        name
        for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT))
        for name in objects_of_tags(run.tags)
    }


def poll_cycle(
    context: dg.SensorEvaluationContext,
    salesforce: SalesforceResource,
    polled: list[SObjectConfig],
    *,
    reserve: float,
    per_run: int,
) -> dg.SensorResult:
    """The runs polling every object of `polled` whose window is due (module docstring), or why none."""
    now = time.time()
    cursor: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
    due = [o for o in polled if cursor.get(o.name) != window(o, now)]
    if not due:
        return dg.SensorResult(skip_reason=f"every polled object was polled in its window ({len(polled)} objects)")
    paused = paused_objects(context.instance, [o.name for o in due])
    busy = objects_in_flight(context.instance)
    ready = [o for o in due if o.name not in paused and o.name not in busy]
    if not ready:
        return dg.SensorResult(
            skip_reason=f"{len(due)} polled objects due, none ready: {len(paused & {o.name for o in due})} paused, "
            f"the others with a run queued or in flight"
        )
    if POLL.api_budget and (hold := budget_hold_back(salesforce, reserve)):
        return dg.SensorResult(skip_reason=hold)
    requests = []
    for start in range(0, len(ready), per_run):
        batch = ready[start : start + per_run]
        windows = ",".join(f"{o.name}:{window(o, now)}" for o in batch)
        names = [o.name for o in batch]
        requests.append(
            dg.RunRequest(
                run_key=f"poll-{hashlib.sha256(windows.encode()).hexdigest()[:20]}",
                asset_selection=[replica_key(n) for n in names],
                run_config=mode_run_config(dict.fromkeys(names, POLL.name)),
                tags=run_tags(mode=POLL.name, reason=f"poll cycle: {len(names)} objects due", objects=names),
            )
        )
    done = cursor | {o.name: window(o, now) for o in ready}
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(done, sort_keys=True))
