"""reconciliation_sensor: replicas with work besides CDC -> one run doing exactly that work
(docs/design/contract.md §6-7).

The work and when to ask for it come from the planner (`sensors/work.py`): a pending resync (overflow), dirty
records, or no table yet (initial load, asked for at once: it needs no events). One run for every replica whose
work is due, each in its mode (op config `reconcile` / `resync`; an initial load is what `apply` does on a replica
with no table), tagged with the reasons, counts and the hidden object and work tags (cdc_assets/names.py). One run for all of
them, not one per object: a run pays its process and Spark start (tens of seconds when cold), the fetches
themselves are small.

Work is left alone while a run carrying it is queued or running, and retried with backoff after a run carrying it
failed; a landing run that merely includes the replica does not hold it back (that starved a resync for minutes
under steady traffic). While the org's daily API budget (from `Sforce-Limit-Info`) is nearly spent, the sensor
holds back. The skip reason always says which case it is: nothing to do, waiting for run X, retry N in S s, a
resync deferred (only damaged landing files asked for it, replication/damaged.py), or holding back for the budget.
A paused object (cdc_assets/operate/pause.py) gets no work until resumed.

It also starts the runs a person asked for from the UI (`resync_objects`, `reconcile_objects`, `describe_objects`:
cdc_assets/operate/asks.py): one run per job run that asked, its objects in the asked mode, tagged with the
action (hidden `TAG_OPERATOR`) and the work it carries, run key `asked-<run id>`. Its cursor keeps, per object, the
ask it started a run for. An object asked for this tick is left out of the work run: the asked run carries it.

Run keys name the materializations that asked for the work, the attempt and the last run that carried it, so a
tick evaluated twice never requests the same work twice, and a retry is a new run.
"""

import hashlib
import json

import dagster as dg

from cdc_assets.actions import ACTIONS
from cdc_assets.names import TAG_DIRTY, TAG_OPERATOR, TAG_REASON, replica_key, run_tags, work_tag
from cdc_assets.operate.asks import Ask, asks_of
from cdc_assets.operate.pause import paused_objects
from replication.config import ReplicationConfig
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from sensors.budget import budget_hold_back
from sensors.work import INITIAL_LOAD, Planned, mode_run_config, plan

SENSOR_NAME = "reconciliation_sensor"


def work_request(due: list[Planned]) -> dg.RunRequest:
    """One run doing the work of every planned item in `due`."""
    reasons = "; ".join(p.work.describe() + (f", retry {p.retry.attempt}" if p.retry.attempt else "") for p in due)
    source = "|".join(
        sorted(f"{p.work.kind}-{p.work.name}-{p.work.source}-a{p.retry.attempt}-{p.retry.after}" for p in due)
    )
    return dg.RunRequest(
        run_key=f"sync-{hashlib.sha1(source.encode()).hexdigest()[:16]}",
        asset_selection=[replica_key(p.work.name) for p in due],
        run_config=mode_run_config({p.work.name: p.work.mode for p in due if p.work.kind != INITIAL_LOAD}),
        tags=run_tags(
            mode="+".join(sorted({p.work.kind for p in due})),
            reason=reasons,
            objects=[p.work.name for p in due],
            hidden={
                TAG_DIRTY: str(sum(p.work.dirty for p in due)),
                **{work_tag(p.work.name): p.work.kind for p in due},
            },
        ),
    )


def asked_requests(asks: dict[str, Ask]) -> list[dg.RunRequest]:
    """One run per job run that asked (`Ask.by`), its objects each in the asked mode (cdc_assets/operate/asks.py)."""
    by_run: dict[str, dict[str, Ask]] = {}
    for name, ask in asks.items():
        by_run.setdefault(ask.by, {})[name] = ask
    requests = []
    for by, asked in sorted(by_run.items()):
        action = ACTIONS[next(iter(asked.values())).action]
        names = sorted(asked)
        requests.append(
            dg.RunRequest(
                run_key=f"asked-{by}",
                asset_selection=[replica_key(n) for n in names],
                run_config=mode_run_config(dict.fromkeys(names, action.name)),
                tags=run_tags(
                    mode=action.name,
                    reason=f"{action.name} asked from the UI (run {by[:8]})",
                    objects=names,
                    hidden={
                        TAG_OPERATOR: action.name,
                        **({work_tag(n): action.asked_for for n in names} if action.asked_for else {}),
                    },
                ),
            )
        )
    return requests


def build_reconciliation_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> dg.SensorDefinition:
    budget_share = replication.options.api_budget_reserve

    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=15,
        default_status=default_status,
        asset_selection=[replica_key(n) for n in replication.names],
        description="Re-materializes a replica in reconcile mode when it has dirty records (gap events, "
        "late events), in resync mode when an overflow asked for a full resync, and loads a "
        "replica with no table; failed work is retried with backoff. Starts the runs a person asked for from the "
        "UI (resync_objects, reconcile_objects, describe_objects).",
    )
    def reconciliation_sensor(
        context: dg.SensorEvaluationContext, salesforce: SalesforceResource, warehouse: DeltaWarehouse
    ) -> dg.SensorResult:
        paused = paused_objects(context.instance, replication.names)  # no work asked for a paused object
        served: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        asks = {
            n: a
            for n, a in asks_of(context.instance, replication.names).items()
            if n not in paused and served.get(n) != a.at
        }
        planned = [p for p in plan(context.instance, warehouse, replication) if p.work.name not in paused | set(asks)]
        due = [p for p in planned if p.ready]
        waiting = "; ".join(f"{p.work.describe()}: {p.retry.wait}" for p in planned if not p.ready)
        if not due and not asks:
            return dg.SensorResult(
                skip_reason=waiting or "nothing to do: no dirty records, pending resync or replica without a table"
            )
        if hold := budget_hold_back(salesforce, budget_share):
            wanted = [p.work.describe() for p in due] + [f"{n}: {a.action} asked from the UI" for n, a in asks.items()]
            return dg.SensorResult(skip_reason=f"{hold}; due: " + "; ".join(wanted))
        requests = asked_requests(asks)
        if due:
            requests.append(work_request(due))
        for request in requests:
            context.log.info(request.tags[TAG_REASON] + (f" (not yet: {waiting})" if waiting else ""))
        cursor = json.dumps(served | {n: a.at for n, a in asks.items()}, sort_keys=True)
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return reconciliation_sensor
