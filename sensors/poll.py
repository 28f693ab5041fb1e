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

Only objects with something to read are polled: for each object due, the org is asked whether any record is newer
than the cursor of its last poll (`poll_next`, which every poll materializes), with a `LIMIT 1` query per object, 25
objects a REST Composite call: an idle cycle over 300 objects costs 12 calls and no run (`quiet_objects` says when
that question is the whole one). An object resuming a Bulk job, due for its Id comparison
(`hard_delete_check_every`), or never polled yet is polled without asking.

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
from datetime import datetime

import dagster as dg

from cdc_assets.actions import POLL
from cdc_assets.config import POLL_SOURCE, ReplicationConfig, SObjectConfig
from cdc_assets.names import META_POLL_NEXT, objects_of_tags, replica_key, run_tags
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
    quiet = quiet_objects(context.instance, salesforce, ready, now)
    polling = [o for o in ready if o.name not in quiet]
    requests = []
    for start in range(0, len(polling), per_run):
        batch = polling[start : start + per_run]
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
    done = json.dumps(cursor | {o.name: window(o, now) for o in ready}, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=f"{len(quiet)} polled objects due, none changed in the org", cursor=done)
    if quiet:
        context.log.info(f"{len(quiet)} polled objects due have nothing new in the org: not polled this window")
    return dg.SensorResult(run_requests=requests, cursor=done)


def quiet_objects(
    instance: dg.DagsterInstance, salesforce: SalesforceResource, due: list[SObjectConfig], now: float
) -> set[str]:
    """The objects of `due` whose next poll would read nothing: the org has no record newer than the cursor of the
    replica's last poll (`poll_next` of its last materialization: cdc_assets/poll/run.py `next_poll`), asked with a
    `LIMIT 1` query per object, 25 objects a call (`SalesforceResource.any_rows`). Never quiet: an object not polled
    yet, one whose last poll read less than `poll_overlap` after its cursor (a record committed late may still
    appear behind it), one resuming a Bulk job, one due for its Id comparison (hard deletes leave no record to
    find), or one whose probe failed."""
    events = instance.get_latest_materialization_events([replica_key(o.name) for o in due])
    probes = {}
    for o in due:
        event = events.get(replica_key(o.name))
        materialization = event.asset_materialization if event is not None else None
        entry = materialization.metadata.get(META_POLL_NEXT) if materialization is not None else None
        upcoming = entry.value if entry is not None else None
        if not isinstance(upcoming, dict) or not upcoming.get("cursor") or upcoming.get("resume"):
            continue
        cursor = datetime.fromisoformat(upcoming["cursor"].replace("Z", "+00:00")).timestamp()
        if datetime.fromisoformat(upcoming["read_at"]).timestamp() < cursor + o.poll.overlap:
            continue
        compared = upcoming.get("ids_compared_at")
        if compared is None or now - datetime.fromisoformat(compared).timestamp() >= o.poll.hard_delete_check_every:
            continue
        probes[o.name] = f"SELECT Id FROM {o.name} WHERE {upcoming['field']} > {upcoming['cursor']} LIMIT 1"
    if not probes:
        return set()
    return {name for name, found in salesforce.any_rows(probes).items() if found is False}
