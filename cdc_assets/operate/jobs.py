"""Operating from the Dagster UI: every action a person needs is a job launched from the launchpad, no file edited.

- `resync_objects` / `reconcile_objects` / `describe_objects` (config `objects: [Account]`): ask for a run of
  those replicas in that mode, which the reconciliation sensor starts at its next tick (asks.py): a run like the
  sensors' own, tagged with its objects and work, in each replica's pool like any writer of it.
- `acknowledge_quarantine`: marks quarantined lines reviewed up to `until` (ISO instant; empty: the newest
  quarantined line), so the checks `quarantine_empty` pass again (cdc_assets/checks.py).
- `pause_replication` / `resume_replication` (config `objects: [Account]`): the flag of pause.py.
- `erase_records` (erase.py) and the upkeep jobs (cdc_assets/upkeep/jobs.py) are defined with what they do.

One job per action whatever the number of objects, the objects in its config (asks.py says why).
"""

from datetime import UTC, datetime

import dagster as dg

from cdc_assets.actions import ACTIONS, SOURCES, Action
from cdc_assets.names import META_PAUSED, TAG_OPERATOR, replica_key
from cdc_assets.operate.asks import Ask, record_asks
from cdc_assets.operate.pause import paused_objects, set_paused
from replication.config import ReplicationConfig
from replication.quarantine import acknowledge_quarantine, newest_quarantined_at
from resources.delta import DeltaWarehouse

ACK_JOB, PAUSE_JOB, RESUME_JOB = "acknowledge_quarantine", "pause_replication", "resume_replication"


def ask_job_name(action: str) -> str:
    return f"{action}_objects"


class ObjectsConfig(dg.Config):
    objects: list[str]  # object names as in replication.yaml, e.g. [Account]


def _refused(replication: ReplicationConfig, objects: list[str], sources: frozenset[str], doing: str) -> str | None:
    """Why `objects` cannot be given to `doing` (None: they can): none given, strangers, or a source it skips."""
    if not objects:
        return f"Cannot {doing} nothing: give `objects` from replication.yaml ({', '.join(replication.names)})"
    if problem := replication.unknown(objects):
        return f"Cannot {doing} {', '.join(objects)}: {problem}"
    if wrong := [n for n in objects if replication.object(n).source not in sources]:
        return f"Cannot {doing} {', '.join(wrong)}: only objects with source {' or '.join(sorted(sources))}"
    return None


def build_ask_job(action: Action, *, replication: ReplicationConfig) -> dg.JobDefinition:
    """`<action>_objects`: records the ask; the reconciliation sensor runs it (cdc_assets/operate/asks.py)."""
    name = ask_job_name(action.name)

    @dg.op(name=f"{name}_op", description=f"Ask for a {action.name} run of the given objects.")
    def ask_op(context: dg.OpExecutionContext, config: ObjectsConfig) -> None:
        if refused := _refused(replication, config.objects, action.job_sources, action.name):
            raise dg.Failure(refused)
        at = datetime.now(UTC).isoformat()
        record_asks(context.instance, config.objects, Ask(action.name, at, context.run_id))
        waiting = paused_objects(context.instance, config.objects)
        context.log.info(
            f"{action.name} of {', '.join(config.objects)} asked at {at}: the reconciliation_sensor starts a run "
            f"of {'them' if len(config.objects) > 1 else 'it'} at its next tick (it must be running: Automation)"
            + (f"; paused, so not before they are resumed: {', '.join(sorted(waiting))}" if waiting else "")
        )

    @dg.job(
        name=name,
        tags={TAG_OPERATOR: action.name},
        description=f"{action.name.capitalize()} Salesforce objects now (config `objects`): {action.job} "
        f"Asks the reconciliation_sensor for the run, which starts it at its next tick.",
    )
    def ask_job():
        ask_op()

    return ask_job


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


def _pause_op(name: str, paused: bool, replication: ReplicationConfig) -> dg.JobDefinition:
    verb = "pause" if paused else "resume"

    @dg.op(name=f"{verb}_replication_op", description=f"{verb.capitalize()} replication of the given objects.")
    def pause_op(context: dg.OpExecutionContext, config: ObjectsConfig) -> None:
        if refused := _refused(replication, config.objects, SOURCES, verb):
            raise dg.Failure(refused)
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
        *(build_ask_job(a, replication=replication) for a in ACTIONS.values() if a.job),
        acknowledge_job,
        _pause_op(PAUSE_JOB, True, replication),
        _pause_op(RESUME_JOB, False, replication),
    ]
