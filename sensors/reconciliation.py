"""reconciliation_sensor: dirty records or a pending resync -> re-materialize exactly those replicas (design §6-7).

It reads each replica's latest materialization metadata (`dirty_records`, `resync_pending`), and requests one run of
exactly the replicas that need work, each in `reconcile` or `resync` mode (its op config), tagged with the reasons
and the counts. A resync wins over a reconcile (it rewrites every row anyway). One run for all of them, not one per
object: a run pays its process and Spark start (tens of seconds when cold), the fetches themselves are small.
At most one run per object is in flight: objects with a queued or running run (tag `cdc/object.<Name>`, which
every run this platform requests carries) are left alone. While the org's daily API budget (from
`Sforce-Limit-Info`) is nearly spent, the sensor holds back and says why.

Run keys name the materializations that asked for the work, so a tick evaluated twice never requests it twice.
"""

import hashlib

import dagster as dg

from cdc_assets.assets import META_DIRTY, META_RESYNC, replica_key
from cdc_assets.config import ReplicationConfig
from resources.salesforce import SalesforceResource
from sensors.budget import budget_hold_back

SENSOR_NAME = "reconciliation_sensor"
TAG_REASON = "cdc/reason"
TAG_MODE = "cdc/mode"  # the modes of the run's replicas, "+"-joined: reconcile, resync or reconcile+resync
TAG_DIRTY = "cdc/dirty_records"
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]


def object_tag(name: str) -> str:
    return f"cdc/object.{name}"  # one namespace separator: Dagster deprecates more


def mode_run_config(modes: dict[str, str]) -> dict:
    """Op config putting each replica `name` of `modes` in its mode."""
    return {"ops": {replica_key(name).to_python_identifier(): {"config": {"mode": mode}}
                    for name, mode in modes.items()}}


def in_flight(instance: dg.DagsterInstance, name: str) -> bool:
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT, tags={object_tag(name): "1"}), limit=1)
    return bool(runs)


def build_reconciliation_sensor(*, replication: ReplicationConfig,
                                default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
                                ) -> dg.SensorDefinition:
    names = replication.names
    budget_share = float(replication.options.get("api_budget_reserve", 0.1))

    @dg.sensor(name=SENSOR_NAME, minimum_interval_seconds=15, default_status=default_status,
               asset_selection=[replica_key(n) for n in names],
               description="Re-materializes a replica in reconcile mode when it has dirty records (gap events, "
                           "late events) and in resync mode when an overflow asked for a full resync.")
    def reconciliation_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource
                              ) -> dg.SensorResult:
        wanted = []
        for name in names:
            event = context.instance.get_latest_materialization_event(replica_key(name))
            if event is None or event.asset_materialization is None:
                continue
            metadata = event.asset_materialization.metadata
            resync = metadata.get(META_RESYNC)
            dirty = metadata.get(META_DIRTY)
            if resync is not None and resync.value:
                wanted.append((name, "resync", str(resync.value), event.run_id, 0))
            elif dirty is not None and int(dirty.value or 0) > 0:
                wanted.append((name, "reconcile", f"{dirty.value} dirty records", event.run_id,
                               int(dirty.value)))
        wanted = [w for w in wanted if not in_flight(context.instance, w[0])]
        if not wanted:
            return dg.SensorResult(skip_reason="no dirty records or pending resync (or runs already in flight)")

        if hold := budget_hold_back(salesforce, budget_share):
            return dg.SensorResult(skip_reason=hold)
        reasons = "; ".join(f"{n}: {m} ({r})" for n, m, r, _, _ in wanted)
        source = "|".join(f"{mode}-{name}-{run}" for name, mode, _, run, _ in sorted(wanted))
        request = dg.RunRequest(
            run_key=f"sync-{hashlib.sha1(source.encode()).hexdigest()[:16]}",
            asset_selection=[replica_key(name) for name, *_ in wanted],
            run_config=mode_run_config({name: mode for name, mode, *_ in wanted}),
            tags={TAG_MODE: "+".join(sorted({mode for _, mode, *_ in wanted})),
                  TAG_REASON: reasons[:1000],
                  TAG_DIRTY: str(sum(dirty for *_, dirty in wanted)),
                  **{object_tag(name): "1" for name, *_ in wanted}},
        )
        context.log.info(reasons)
        return dg.SensorResult(run_requests=[request])

    return reconciliation_sensor
