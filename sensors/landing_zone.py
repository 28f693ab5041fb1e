"""landing_zone_sensor: new landing files -> one run of change_events and the replicas that must apply them.

The cursor (JSON) remembers only files requested but not yet ingested, so it stays small: whether a file is
ingested is read from change_events itself (its commits name the files). The run key is derived from the file set
(paths and sizes), so a re-evaluated tick never requests the same files twice.

A landing run includes the replicas the new files name, and also every replica that may have to apply something
once they are ingested: one holding a transaction back (the new files may close it: a transaction spanning
objects must be applied by all of them in the same run, docs/design/contract.md §5), one that may hold rows of the
newest transaction, and one with ingested rows it has not applied (files a run ingested without the sensor having seen
them). The run's replicas then apply through one cut decided once for the run (`replication/closure.py`).

One landing run at a time runs (the instance's limit, dagster.yaml), and at most one waits: while a landing run is
in flight, new files wait until it has ingested what it found (`has_ingested`: read from change_events' commits and
the run's change_events materialization, not guessed), then the next run is requested at once for every pending
file and waits in the queue for the first to end. Its tick, creation and queue wait then overlap the replica steps
of the run in flight instead of following them. No two landing runs request the same files: the one in flight
ingests every file pending when its ingest step starts, and the next is requested only after that step has
committed its last batch; the run key comes from the file set, so a re-evaluated tick does not request them twice.
The cost is in the UI: Dagster records a run's planned materializations and check evaluations when it creates it,
so while the next run is queued each replica it selects shows "Materializing…" with its checks "in progress"
("0 / N passed"), which is the truth: a newer change is on its way to it. The last results show again once a run
ends with nothing queued behind it (docs/concepts/latency.md).

Files whose landing run failed are requested again with backoff (as `sensors/work.py` retries replica work), with
the attempt in the run key; until then the skip reason says when.

Paused objects (cdc_assets/operate/pause.py) are left out of every run this sensor requests; their events are
still ingested. After a resume, one catch-up run of the object applies what was ingested meanwhile.

Every `SURVEY_SECONDS` the sensor also surveys the zone for what it does not read (resources/landing_zone.py
`survey`: files that are not `*.jsonl`/`*.jsonl.gz`, symbolic links, FIFOs and devices, names that are not UTF-8,
in-flight files a dead writer left) and, when that changed, reports it: an `AssetObservation` of `landing_zone`
(counts that plot over time) and an evaluation of the `landing_zone_files_read` check, failing while any such entry
is there and naming a few (control characters escaped: a file name may hold a newline). The check, which also runs
on demand, is defined with the other checks on the zone (cdc_assets/landing_checks.py).

When nothing new lands, the newest transaction eventually counts as closed (`transaction_close_after`, the rule in
`replication/closure.py`); the sensor then requests one run of the replicas that may hold it (its entities) or have
anything else to apply (`replicas_to_include`), so that transaction is applied by all that hold it, without waiting
for more events (retried the same way if it fails). Not every replica: with hundreds of objects, a transaction of
one would otherwise start a run of them all.
"""

import json
import time
from datetime import UTC, datetime

import dagster as dg
from dagster._core.storage.tags import PRIORITY_TAG

from cdc_assets.actions import APPLY
from cdc_assets.landing_checks import FILES_READ_CHECK, survey_report
from cdc_assets.names import (
    CHANGE_EVENTS_KEY,
    LANDING_ZONE,
    TAG_CLOSE_SEQ,
    TAG_FILES,
    TAG_REASON,
    ingest_keys,
    replica_key,
    resumed_tag,
    run_tags,
)
from cdc_assets.operate.pause import paused_objects, resumed_at
from replication.closure import open_transaction
from replication.config import ReplicationConfig
from replication.ingest import pending_files
from replication.state import IngestState
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import (
    LandingFile,
    LandingZone,
    file_set_key,
)
from sensors.work import IN_FLIGHT, Backoff, replicas_to_include, retry_state

SENSOR_NAME = "landing_zone_sensor"
MODE_APPLY = APPLY.name  # the replicas' own action: apply what change_events holds
REASON_FILES = "new landing files"
REASON_CLOSE = "newest transaction closed by timeout"
# Tick at every look of the sensor daemon, which looks at its sensors every 5 s
# (dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME). Not 5: a tick's timestamp is taken a moment after the loop
# starts, so 5 s later the interval has not quite passed and the sensor waits for the loop after (ticks come 10 s
# apart with 5, 15 s with 10). A tick that finds no new file is cheap (a listing and change_events' last commit),
# and the wait it bounds (files landed while a landing run was in flight, until the next run is requested) is part
# of every change's latency (docs/concepts/latency.md).
INTERVAL_SECONDS = 4
# Dagster's run queue launches higher priorities first, and a run's priority also orders the claims of its steps
# on a pool (https://docs.dagster.io/troubleshooting/run-queue): a landing run, whose wait is every change's
# latency, goes before the upkeep, changefeed and reconciliation runs queued before it.
PRIORITY = {PRIORITY_TAG: "10"}
SURVEY_SECONDS = 60  # a survey lists the whole zone once more (on an object store: requests that cost)


def build_landing_zone_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> dg.SensorDefinition:
    replicas = [replica_key(n) for n in replication.names]
    backoff = Backoff.from_options(replication.options)

    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=default_status,
        asset_selection=[*ingest_keys(replication.names), *replicas],
        description="Requests a change_events + replica run for newly landed CDC files (again, with "
        "backoff, if that run failed), and a replica run when the newest transaction closes "
        "by timeout.",
    )
    def landing_zone_sensor(
        context: dg.SensorEvaluationContext, landing: LandingZone, warehouse: DeltaWarehouse
    ) -> dg.SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        requested: dict[str, int] = cursor.get("requested", {})
        pending = pending_files(warehouse, landing)
        new = [f for f in pending if requested.get(f.path) != f.size]
        cursor["requested"] = {f.path: f.size for f in pending}
        ce_state = IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS))
        busy = landing_run_in_flight(context.instance) if pending else None
        if busy and not has_ingested(context.instance, busy, ce_state):
            request, why = None, waiting_for(busy, pending)
        elif busy:
            request, why = next_landing_request(context, landing, replication, ce_state, pending, busy), None
        elif new:
            request, why = (
                landing_request(context.instance, landing, replication, ce_state, new, key=file_set_key(new)),
                None,
            )
        elif pending:
            request, why = _again(context, landing, replication, ce_state, pending, backoff)
        elif catch_up := resume_request(context.instance, replication):
            request, why = catch_up, None
        elif busy := landing_run_in_flight(context.instance):
            # It ingested every file and is applying them: a close run now would write the same replicas beside
            # it, and the two runs' steps could end in the opposite order to their creation, which leaves
            # Dagster's latest check records on the older materialization (the changefeed then waits for the
            # replica's next change). The close comes at the next tick after it ends, if still needed.
            request, why = None, f"closing waits for landing run {busy.run_id[:8]} ({busy.status.value})"
        else:
            request, why = close_request(context.instance, replication, ce_state, backoff, cursor)
        events = survey_events(landing, cursor)  # before the cursor is written: it records what was reported
        return dg.SensorResult(
            run_requests=[request] if request else [],
            skip_reason=why,
            asset_events=events,
            cursor=json.dumps(cursor, sort_keys=True),
        )

    return landing_zone_sensor


def survey_events(landing: LandingZone, cursor: dict) -> list[dg.AssetObservation | dg.AssetCheckEvaluation]:
    """The observation and check evaluation of a survey of the zone, when one is due (`SURVEY_SECONDS`) and found
    something other than the last one (`cursor["survey"]`); else none."""
    now = time.time()
    if now - cursor.get("surveyed_at", 0) < SURVEY_SECONDS:
        return []
    cursor["surveyed_at"] = now
    passed, description, metadata = survey_report(landing.survey(now), landing)
    seen = json.dumps([description, {k: v.value for k, v in metadata.items()}])
    if seen == cursor.get("survey"):
        return []
    cursor["survey"] = seen
    return [
        dg.AssetObservation(asset_key=LANDING_ZONE, metadata=metadata, description=description),
        dg.AssetCheckEvaluation(
            asset_key=LANDING_ZONE,
            check_name=FILES_READ_CHECK,
            passed=passed,
            metadata=metadata,
            description=description,
        ),
    ]


def _again(
    context: dg.SensorEvaluationContext,
    landing: LandingZone,
    replication: ReplicationConfig,
    ce_state: IngestState,
    pending: list[LandingFile],
    backoff: Backoff,
) -> tuple[dg.RunRequest | None, str | None]:
    """Files seen before and still not ingested: wait for the landing run in flight; ask again once it ended without
    them (it started before they landed), or after a backoff once it failed."""
    runs = runs_tagged(context.instance, {TAG_REASON: REASON_FILES})
    if not runs:
        return None, f"{len(pending)} landing files requested, their run not created yet"
    retry = retry_state(runs, f"{len(pending)} landing files", backoff)
    if retry.wait:
        return None, retry.wait
    last = runs[0].dagster_run
    request = landing_request(
        context.instance,
        landing,
        replication,
        ce_state,
        pending,
        key=f"{file_set_key(pending)}-{retry.attempt}-{last.run_id[:8]}",
    )
    context.log.info(
        f"Requesting {len(pending)} landing files again (retry {retry.attempt}) after run "
        f"{last.run_id[:8]} ({last.status.value})"
    )
    return request, None


def runs_tagged(instance: dg.DagsterInstance, tags: dict[str, str], limit: int = 20) -> list[dg.RunRecord]:
    return list(instance.get_run_records(filters=dg.RunsFilter(tags=tags), limit=limit))


def landing_request(
    instance: dg.DagsterInstance,
    landing: LandingZone,
    replication: ReplicationConfig,
    ce_state: IngestState,
    files: list[LandingFile],
    *,
    key: str,
) -> dg.RunRequest:
    """A run ingesting `files` (and every other pending file) and applying them in every replica that must."""
    entities = landing.entities_in(files)
    names = {n for n in replication.names if entities is None or n in entities}
    names |= replicas_to_include(instance, replication, ce_state)
    names -= paused_objects(instance, replication.names)
    # The slices of the objects it applies only: a run touching one object logs one slice, not every object's.
    applied = [n for n in replication.names if n in names]
    selection = [*ingest_keys(applied), *[replica_key(n) for n in applied]]
    return dg.RunRequest(
        run_key=f"landing-{key}",
        asset_selection=selection,
        tags=run_tags(mode=MODE_APPLY, reason=REASON_FILES, objects=names, hidden={TAG_FILES: str(len(files))})
        | PRIORITY,
    )


def has_ingested(instance: dg.DagsterInstance, run: dg.DagsterRun, ce_state: IngestState) -> bool:
    """`run` has ingested every file it will: change_events' newest commit is its own (`ce_state`, which the sensor
    reads anyway: free), and its ingest step has recorded change_events' materialization, which it does once every
    batch is committed (one indexed query, asked only after the first test passed: the commit alone does not say
    whether a run ingesting more than `max_ingest_batch_bytes` has batches left)."""
    if ce_state.run_id != run.run_id:
        return False
    latest = instance.get_latest_materialization_event(CHANGE_EVENTS_KEY)
    return latest is not None and latest.run_id == run.run_id


def waiting_for(run: dg.DagsterRun, pending: list[LandingFile]) -> str:
    return (
        f"{len(pending)} landing files wait for landing run {run.run_id[:8]} ({run.status.value}): the next "
        "landing run is requested once that one has ingested what it found"
    )


def next_landing_request(
    context: dg.SensorEvaluationContext,
    landing: LandingZone,
    replication: ReplicationConfig,
    ce_state: IngestState,
    pending: list[LandingFile],
    busy: dg.DagsterRun,
) -> dg.RunRequest:
    """The run for the files that landed after the landing run in flight (`busy`) listed what it ingests: none of
    them is that run's, so it is requested now and waits in the queue (one landing run at a time, dagster.yaml)
    instead of the next tick after `busy` ends."""
    context.log.info(
        f"Requesting {len(pending)} landing files while landing run {busy.run_id[:8]} ({busy.status.value}), "
        "which has ingested its own, applies them"
    )
    return landing_request(context.instance, landing, replication, ce_state, pending, key=file_set_key(pending))


def landing_run_in_flight(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    """The newest landing run queued or running, if any (the instance runs one at a time; a second one waits in the
    queue)."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT, tags={TAG_REASON: REASON_FILES}), limit=1)
    return runs[0] if runs else None


def close_request(
    instance: dg.DagsterInstance, replication: ReplicationConfig, ce_state: IngestState, backoff: Backoff, cursor: dict
) -> tuple[dg.RunRequest | None, str | None]:
    """The run of the replicas that apply the newest transaction once it counts as closed by timeout (every one
    that may hold rows of it, so that they apply it in this one run, and any with rows to apply); else why not.
    `cursor["closed_seq"]` remembers the last ingest it was requested for."""
    seq = ce_state.ingest_seq
    if not seq or not ce_state.newest:
        return None, "no new landing files"
    if open_transaction(ce_state, replication.transaction_close_after, datetime.now(UTC)):
        return None, "no new landing files; the newest transaction is still open"
    runs = runs_tagged(instance, {TAG_REASON: REASON_CLOSE, TAG_CLOSE_SEQ: str(seq)})
    if not runs and cursor.get("closed_seq") == seq:
        return None, f"closing ingest {seq}: run requested, not created yet"
    if not runs:
        attempt = 0
    else:
        retry = retry_state(runs, f"closing ingest {seq}", backoff)
        if retry.wait or not retry.attempt:  # waiting, or done
            return None, retry.wait or "no new landing files; the newest transaction is applied"
        attempt = retry.attempt
    cursor["closed_seq"] = seq
    # Only the replicas that may hold it or have anything to apply: the run's size follows the transaction, not
    # the number of objects replicated.
    paused = paused_objects(instance, replication.names)
    waiting = replicas_to_include(instance, replication, ce_state)
    names = [n for n in replication.names if n in waiting and n not in paused]
    if not names:
        return (
            None,
            "every replica that holds the newest transaction is paused"
            if waiting
            else "no new landing files; no replica holds the newest transaction",
        )
    return dg.RunRequest(
        run_key=f"close-{seq}" + (f"-{attempt}" if attempt else ""),
        asset_selection=[replica_key(n) for n in names],
        tags=run_tags(mode=MODE_APPLY, reason=REASON_CLOSE, objects=names, hidden={TAG_CLOSE_SEQ: str(seq)}) | PRIORITY,
    ), None


REASON_RESUME = "catch up after resume"


def resume_request(instance: dg.DagsterInstance, replication: ReplicationConfig) -> dg.RunRequest | None:
    """One run of the objects resumed (and not paused again) whose resume no catch-up run carries yet (tag
    `resumed_tag(<Name>)` = when it was resumed), so each resume is asked once."""
    paused = paused_objects(instance, replication.names)
    due = {
        n: at
        for n, at in resumed_at(instance, replication.names).items()
        if n not in paused and not runs_tagged(instance, {resumed_tag(n): at}, limit=1)
    }
    if not due:
        return None
    return dg.RunRequest(
        run_key="resume-" + "-".join(f"{n}@{at}" for n, at in sorted(due.items())),
        asset_selection=[replica_key(n) for n in sorted(due)],
        tags=run_tags(
            mode=MODE_APPLY, reason=REASON_RESUME, objects=due, hidden={resumed_tag(n): at for n, at in due.items()}
        ),
    )
