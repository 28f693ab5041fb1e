"""Operating from the Dagster UI: every action a person needs is a job launched from the launchpad, no file edited.

- `resync_<Object>` / `reconcile_<Object>`: the replica asset in that mode (the op config is preset: open the job,
  Launchpad, Launch). Tagged like the reconciliation sensor's runs (cdc_assets/names.py: mode, object and
  work tags), so the sensors see the work as carried and do not ask for it again meanwhile; the run is
  in the replica's pool like any writer of it.
- `acknowledge_quarantine`: marks quarantined lines reviewed up to `until` (ISO instant; empty: the newest
  quarantined line), so the checks `quarantine_empty` pass again (cdc_assets/checks.py).
- `pause_replication` / `resume_replication` (config `objects: [Account]`): the flag of pause.py.
"""

from datetime import UTC, datetime

import dagster as dg

from cdc_assets.actions import ACTIONS
from cdc_assets.names import META_PAUSED, TAG_OPERATOR, replica_key, run_tags, work_tag
from cdc_assets.operate.pause import set_paused
from replication.config import ReplicationConfig
from replication.quarantine import acknowledge_quarantine, newest_quarantined_at
from resources.delta import DeltaWarehouse

ACK_JOB, PAUSE_JOB, RESUME_JOB = "acknowledge_quarantine", "pause_replication", "resume_replication"
MODES = ("resync", "reconcile")


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
