"""The poll sensor: one for every `source: poll` object of replication.yaml, asking for the poll runs that are due
(replication/poll/ does the work).

An org may poll hundreds of objects, so the sensor plans a **poll cycle** (sensors/cycle.py, which the describe and
formula sensors share), not a run per object: each tick it takes
the objects whose window is due (one window per `poll_interval` of each object: n = seconds since the epoch //
interval, kept per object in the sensor's cursor) and asks for one run carrying them all, or a few of at most
`poll_objects_per_run` each. A run is a process of its own with a fixed cost (~11 s on two cores,
bench/RESULTS.md), paid once per cycle instead of once per object; its replica steps run one after the other in it
(the in-process executor), each reading only its own object's changes and committing on its own, so one object's
failure fails its step and leaves the others' commits. A failing object backs off on its own: after k failed runs
in a row it waits poll_interval x 2^(k-1), at most `retry_backoff_max_seconds` (or one interval, if longer), and the
sensor's log names it (sensors/cycle.py).

Only objects with something to read are polled: for each object due, the org is asked whether any record is newer
than the cursor of its last poll (`poll_next`, which every poll materializes), with a `LIMIT 1` query per object, 25
objects a REST Composite call: an idle cycle over 300 objects costs 12 calls and no run (`quiet_objects` says when
that question is the whole one). An object resuming a Bulk job, due for its Id comparison
(`hard_delete_check_every`), or never polled yet is polled without asking.

What it skips, as every cycle does: an object that is paused, or one whose run (any run: its hidden
object tag) is queued or in flight (found with one query of the in-flight runs, whatever the number of objects),
and every object while the org's daily API budget is nearly spent (`api_budget_reserve`). The run key names the
objects and their windows, so a tick evaluated twice asks for the same runs. Runs are tagged `cdc/mode=poll`;
whether a run also compares Ids with the org (hard deletes) is decided per object by the run from the replica's own
commit state (`hard_delete_check_every`).
"""

from datetime import datetime

import dagster as dg

from cdc_assets.actions import POLL
from cdc_assets.names import META_POLL_NEXT, replica_key
from replication.config import POLL_SOURCE, ReplicationConfig, SObjectConfig
from resources.salesforce import SalesforceResource
from sensors.cycle import Cycle, build_cycle_sensor

SENSOR_NAME = "poll_sensor"
MAX_TICK_SECONDS = 60  # a long poll_interval is still checked this often (a window missed while held back)


def build_poll_sensors(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> list[dg.SensorDefinition]:
    polled = {o.name: o for o in replication.objects if o.source == POLL_SOURCE}
    if not polled:
        return []
    per_run = replication.options.poll_objects_per_run

    def quiet(instance: dg.DagsterInstance, salesforce: SalesforceResource, due: list[str], now: float) -> set[str]:
        return quiet_objects(instance, salesforce, [polled[n] for n in due], now)

    cycle = Cycle(
        POLL,
        every={n: o.poll.interval for n, o in polled.items()},
        per_run=per_run,
        reserve=replication.options.api_budget_reserve,
        reason="poll cycle",
        done="polled",
        quiet=quiet,
        retry_cap=replication.options.retry_backoff_max_seconds,
    )
    description = (
        f"Polls the {len(polled)} Salesforce objects without Change Data Capture, each every its poll_interval: "
        f"one run carries every object due (at most {per_run} a run), each reading the records changed since the "
        f"cursor kept in its replica's Delta commits."
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


def quiet_objects(
    instance: dg.DagsterInstance, salesforce: SalesforceResource, due: list[SObjectConfig], now: float
) -> set[str]:
    """The objects of `due` whose next poll would read nothing: the org has no record newer than the cursor of the
    replica's last poll (`poll_next` of its last materialization: replication/poll/run.py `next_poll`), asked with a
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
