"""Operating from the Dagster UI: every action a person needs is a job launched from the launchpad, no file edited.

- `<action>_<Object>` (`resync_<Object>`, `reconcile_<Object>`): the replica asset doing that run action, for each
  action with a `job` in cdc_assets/actions.py (the op config is preset: open the job, Launchpad, Launch). Tagged
  like the reconciliation sensor's runs (cdc_assets/run_tags.py: mode, object and work tags), so the sensors see
  the work as carried and do not ask for it again meanwhile; the run is in the replica's pool like any writer of
  it.
- `acknowledge_quarantine`: marks quarantined lines reviewed up to `until` (ISO instant; empty: the newest
  quarantined line), so the checks `quarantine_empty` pass again (cdc_assets/checks.py).
- `pause_replication` / `resume_replication` (config `objects: [Account]`): the flag of pause.py.
- `replica_status_sensor` (`build_status_sensor`): per object an observation
  of its replica asset with `lag_seconds`, `dirty_records`, `last_error`, `api_calls_today` (the object's own runs)
  and the org's `api_used_today` / `api_limit` (Sforce-Limit-Info), and `paused`; numbers plot on the asset page.
"""

import time
from collections.abc import Mapping
from datetime import UTC, datetime

import dagster as dg

from cdc_assets.actions import ACTIONS
from cdc_assets.assets import META_API_CALLS, META_DIRTY, META_LAG, replica_key
from cdc_assets.checks import acknowledge_quarantine, newest_quarantined_at
from cdc_assets.config import ReplicationConfig
from cdc_assets.operate.pause import paused_objects, set_paused
from cdc_assets.run_tags import hidden_tag, object_tag, run_tags, work_tag
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource

TAG_OPERATOR = hidden_tag("operator")  # the action, on runs a person launched from the UI
ACK_JOB, PAUSE_JOB, RESUME_JOB = "acknowledge_quarantine", "pause_replication", "resume_replication"
STATUS_SENSOR = "replica_status_sensor"
STATUS_BATCH = 50  # objects the status sensor observes a tick (in turn: each every ceil(N / 50) ticks)
META_PAUSED, META_LAST_ERROR = "paused", "last_error"


def mode_job_name(mode: str, name: str) -> str:
    return f"{mode}_{name}"


def build_mode_jobs(*, replication: ReplicationConfig) -> list:
    """`<action>_<Object>` for every action with a job and every object of its `job_sources` (resync: every object;
    reconcile: cdc objects)."""
    return [
        dg.define_asset_job(
            name=mode_job_name(action.name, o.name),
            selection=[replica_key(o.name)],
            config={"ops": {replica_key(o.name).to_python_identifier(): {"config": {"mode": action.name}}}},
            tags=run_tags(
                mode=action.name,
                reason=f"{action.name} of {o.name} from the UI",
                objects=[o.name],
                hidden={
                    TAG_OPERATOR: action.name,
                    **({work_tag(o.name): action.asked_for} if action.asked_for else {}),
                },
            ),
            description=f"{action.name.capitalize()} Salesforce {o.name} now: {action.job}",
        )
        for o in replication.objects
        for action in ACTIONS.values()
        if action.job and o.source in action.job_sources
    ]


class AcknowledgeConfig(dg.Config):
    until: str = ""  # ISO 8601 instant with its zone; empty: the newest quarantined line


@dg.op(name="acknowledge_quarantine_op", description="Mark quarantined lines up to `until` as reviewed.")
def acknowledge_op(context: dg.OpExecutionContext, config: AcknowledgeConfig, warehouse: DeltaWarehouse) -> None:
    until = datetime.fromisoformat(config.until) if config.until else newest_quarantined_at(warehouse)
    if until is None:
        context.log.info("Nothing was ever quarantined: nothing to acknowledge")
        return
    if until.tzinfo is None:
        raise dg.Failure(f"`until` {config.until!r} has no time zone: give one, e.g. {config.until}+00:00")
    version = acknowledge_quarantine(warehouse, until)
    context.log.info(f"Quarantined lines up to {until.isoformat()} acknowledged (_quarantine version {version})")


class ObjectsConfig(dg.Config):
    objects: list[str]  # object names as in replication.yaml, e.g. [Account]


def _pause_op(name: str, paused: bool, replication: ReplicationConfig) -> dg.JobDefinition:
    verb = "pause" if paused else "resume"

    @dg.op(name=f"{verb}_replication_op", description=f"{verb.capitalize()} replication of the given objects.")
    def pause_op(context: dg.OpExecutionContext, config: ObjectsConfig) -> None:
        unknown = sorted(set(config.objects) - set(replication.names))
        if unknown or not config.objects:
            raise dg.Failure(
                f"Cannot {verb} {', '.join(unknown) or 'nothing'}: give `objects` from "
                f"replication.yaml ({', '.join(replication.names)})"
            )
        at = datetime.now(UTC).isoformat()
        for obj in config.objects:
            set_paused(context.instance, obj, paused, at=at)
            context.log_event(
                dg.AssetObservation(
                    asset_key=replica_key(obj),
                    metadata={META_PAUSED: dg.MetadataValue.bool(paused)},
                    description=f"replication {verb}d at {at}",
                )
            )
        context.log.info(f"Replication {verb}d: {', '.join(config.objects)}")

    @dg.job(
        name=name,
        tags={TAG_OPERATOR: verb},
        description=f"{verb.capitalize()} replication of objects (config `objects`). "
        + (
            "Events keep landing in change_events; the replica waits."
            if paused
            else "The landing sensor then asks one catch-up run of each."
        ),
    )
    def pause_job():
        pause_op()

    return pause_job


def build_operator_jobs(*, replication: ReplicationConfig) -> list:
    @dg.job(
        name=ACK_JOB,
        tags={TAG_OPERATOR: "acknowledge_quarantine"},
        description="Acknowledge quarantined lines (after reviewing $CDC_WAREHOUSE/_quarantine): the checks "
        "quarantine_empty pass again. Config `until`: ISO instant; empty: everything so far.",
    )
    def acknowledge_job():
        acknowledge_op()

    return [
        *build_mode_jobs(replication=replication),
        acknowledge_job,
        _pause_op(PAUSE_JOB, True, replication),
        _pause_op(RESUME_JOB, False, replication),
    ]


# -- status ----------------------------------------------------------------------------------------------------------


def _today_start() -> float:
    now = datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def _number(metadata: Mapping[str, dg.MetadataValue], key: str) -> float:
    """A count or measure a materialization reported (`dg.MetadataValue.int` / `.float`); 0 when it has none."""
    value = metadata[key].value if key in metadata else 0
    assert isinstance(value, int | float), f"materialization metadata {key} is {value!r}, not a number"
    return value


def api_calls_today(instance: dg.DagsterInstance, name: str, limit: int = 500) -> int:
    """API calls the object's materializations reported since 00:00 UTC (metadata `api_calls`)."""
    since, total = _today_start(), 0
    for record in instance.fetch_materializations(replica_key(name), limit=limit).records:
        if record.timestamp < since:
            break
        materialization = record.asset_materialization
        assert materialization is not None, "a materialization record holds its materialization"
        total += int(_number(materialization.metadata, META_API_CALLS))
    return total


def last_error(instance: dg.DagsterInstance, name: str) -> str:
    """The newest failed run of the object, if it failed after its last materialization: `<run id>: <message>`."""
    failed = instance.get_run_records(
        filters=dg.RunsFilter(tags={object_tag(name): "1"}, statuses=[dg.DagsterRunStatus.FAILURE]), limit=1
    )
    if not failed:
        return ""
    latest = instance.get_latest_materialization_event(replica_key(name))
    record = failed[0]
    ended = record.end_time or record.update_timestamp.timestamp()
    if latest is not None and latest.timestamp > ended:
        return ""
    failures = instance.all_logs(record.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    message = next(
        (
            e.dagster_event.step_failure_data.error.message.strip()
            for e in failures
            if e.dagster_event and e.dagster_event.step_failure_data.error
        ),
        "run failed",
    )
    return f"{record.dagster_run.run_id[:8]}: {message[:500]}"


def status_of(
    instance: dg.DagsterInstance, warehouse: DeltaWarehouse, name: str, *, paused: bool, usage: dict[str, int]
) -> dict[str, dg.MetadataValue]:
    event = instance.get_latest_materialization_event(replica_key(name))
    meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
    # The lag the last materialization reported, aged since: every commit that moves the replica's newest applied
    # change materializes it, so no table load is needed (~0.1 s each, times hundreds of objects a tick).
    lag = _number(meta, META_LAG) + max(time.time() - event.timestamp, 0.0) if event and META_LAG in meta else 0.0
    return {
        "lag_seconds": dg.MetadataValue.float(round(lag, 1)),
        META_DIRTY: dg.MetadataValue.int(int(_number(meta, META_DIRTY))),
        META_LAST_ERROR: dg.MetadataValue.text(last_error(instance, name)),
        "api_calls_today": dg.MetadataValue.int(api_calls_today(instance, name)),
        "api_used_today": dg.MetadataValue.int(usage.get("used", 0)),
        "api_limit": dg.MetadataValue.int(usage.get("limit", 0)),
        META_PAUSED: dg.MetadataValue.bool(paused),
    }


def build_status_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus, interval: int = 60
) -> dg.SensorDefinition:
    @dg.sensor(
        name=STATUS_SENSOR,
        minimum_interval_seconds=interval,
        default_status=default_status,
        description="Per replicated object, an observation of its replica: lag, dirty records, last error, "
        "API calls today (its runs, and the org's budget used), paused. Plots on each asset page.",
    )
    def replica_status_sensor(
        context: dg.SensorEvaluationContext, warehouse: DeltaWarehouse, salesforce: SalesforceResource
    ) -> dg.SensorResult:
        paused = paused_objects(context.instance, replication.names)
        usage = salesforce.api_usage()
        # At most STATUS_BATCH objects a tick, in turn (the cursor: where the next tick starts), so a tick's cost
        # does not follow the number of objects replicated.
        names = replication.names
        start = int(context.cursor or 0) % max(len(names), 1)
        batch = (names[start:] + names[:start])[:STATUS_BATCH]
        events = [
            dg.AssetObservation(
                asset_key=replica_key(n),
                description="replica status",
                metadata=status_of(context.instance, warehouse, n, paused=n in paused, usage=usage),
            )
            for n in batch
        ]
        return dg.SensorResult(asset_events=events, cursor=str((start + len(batch)) % max(len(names), 1)))

    return replica_status_sensor
