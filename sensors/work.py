"""What replicas need besides applying CDC, and whether to ask for it now: the planner both sensors share.

**Work** (`needed_work`): from each replica's latest materialization metadata and its table, one of
- `resync`: an overflow left a pending resync (`resync_pending`);
- `reconcile`: the replica has dirty records (`dirty_records`);
- `initial_load`: no table yet and `initial_load: true` (needs no events: nothing else would start it), for an
  object replicated from CDC. A polled object's first poll is its initial load, and the poll sensor asks for it at
  once, a bounded number of objects a run (`poll_objects_per_run`): asked here too, hundreds of objects would
  each be loaded by one and polled again by the other in a run of them all.
Which run action does each, and which runs also do it, is the actions' registry's to say (cdc_assets/actions.py:
`asked_for`, `covers`).

**When** (`plan`): a resync only damaged landing files asked for waits until the time its replica published
(`resync_deferred_until`: at most one such resync per object per `damaged_resync_every`, replication/damaged.py),
and says so; meanwhile the replica's dirty records are reconciled as usual. The runs that did or do the work are
found in the instance by their tags (every run the sensors request tags each object it includes and the work it
does for it, hidden tags of cdc_assets/names.py), not in a sensor cursor: so either sensor sees the runs of the
other, and nothing is lost when a cursor is reset. For each piece of work:
- a run carrying it is queued or running: wait for it ("waiting for run <id> (<status>)");
- the runs that carried it last failed (or were canceled) without materializing the replica, n times in a row:
  retry after a backoff (`retry_backoff_seconds`, default 30, doubling up to `retry_backoff_max_seconds`, default
  600; replication.yaml options) counted from the end of the last failure, and say so until then;
- else ask for it now (attempt n, which the run key includes, so a retry is a new run).

A landing run that includes a replica does not count as carrying its reconcile or resync: that work gets its own
run, which starts alongside (the runs' concurrency pools keep writes to one table in order) instead of waiting
behind a steady stream of landing runs. (It does carry an initial load: any run of a replica with no table loads
it first.) Landing runs could carry the work too, in their op config, saving a run start; they do not, so that
only this sensor spends the org's API budget and checks it first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from cdc_assets.actions import ASKED_FOR, DIRTY_RECORDS, INITIAL_LOAD, PENDING_RESYNC, carried_by
from cdc_assets.names import (
    META_APPLIED_THROUGH,
    META_DIRTY,
    META_HELD,
    META_RESYNC,
    META_RESYNC_DEFERRED,
    object_tag,
    objects_of_tags,
    replica_key,
    work_tag,
)
from replication.closure import holders
from replication.config import POLL_SOURCE, ReplicationConfig, ReplicationOptions
from replication.state import IngestState
from resources.delta import DeltaWarehouse

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
FAILED = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def objects_in_flight(instance: dg.DagsterInstance) -> set[str]:
    """The objects of every run queued or in flight (their hidden object tags, which every run this platform
    requests carries), from one query whatever the number of objects."""
    return {
        name
        for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT))
        for name in objects_of_tags(run.tags)
    }


def mode_run_config(modes: dict[str, str]) -> dict:
    """Op config putting each replica `name` of `modes` in its mode."""
    return {
        "ops": {replica_key(name).to_python_identifier(): {"config": {"mode": mode}} for name, mode in modes.items()}
    }


@dataclass(frozen=True)
class Backoff:
    first: float = 30.0
    cap: float = 600.0

    @classmethod
    def from_options(cls, options: ReplicationOptions) -> Backoff:
        return cls(options.retry_backoff_seconds, options.retry_backoff_max_seconds)

    def delay(self, failures: int) -> float:
        return min(self.first * 2 ** (failures - 1), self.cap) if failures else 0.0


def failed_in_a_row(instance: dg.DagsterInstance, names: list[str], limit: int = 10) -> dict[str, tuple[int, float]]:
    """The replicas of `names` whose latest run ended without materializing them (their step failed, or the run
    did before it): per replica, how many of its runs in a row did so (at most `limit`) and when the newest ended.
    Per replica, not per run: a run carrying fifty objects fails when one step does, and the other forty-nine
    committed. Runs in flight are the caller's to leave out. One query for all of `names` (the latest run that
    planned each replica, beside its latest materialization's); two more for each replica found failing."""
    out = {}
    for record in instance.get_asset_records([replica_key(n) for n in names]):
        entry = record.asset_entry
        materialized = entry.last_materialization_record
        materialized_by = materialized.run_id if materialized is not None else None
        if entry.last_run_id is None or entry.last_run_id == materialized_by:
            continue
        last = instance.get_run_record_by_id(entry.last_run_id)
        if last is None or last.dagster_run.status not in FAILED:
            continue
        # The runs before it that failed it too: those the sensors asked for carry its object tag (a run launched
        # by hand may not, and counts as one).
        name = entry.asset_key.path[-1]
        failures = 0
        for run in instance.get_run_records(filters=dg.RunsFilter(tags={object_tag(name): "1"}), limit=limit):
            if run.dagster_run.run_id == materialized_by or run.dagster_run.status not in FAILED:
                break
            failures += 1
        out[name] = (max(failures, 1), last.end_time or last.update_timestamp.timestamp())
    return out


@dataclass(frozen=True)
class Retry:
    """Where a piece of work stands given its runs: `wait` says why not now (None: ask now, as `attempt`);
    `after` is the newest run that carried it (part of the run key, so no situation reuses an old key)."""

    attempt: int = 0
    wait: str | None = None
    after: str = ""


def retry_state(
    records: list[dg.RunRecord],
    what: str,
    backoff: Backoff,
    *,
    now: float | None = None,
    materialized_by: str | None = None,
) -> Retry:
    """`records`: the runs that carried `what`, newest first. A run that materialized the replica
    (`materialized_by`) did the work even if a check failed the run after."""
    now = time.time() if now is None else now
    for record in records:
        if record.dagster_run.status in IN_FLIGHT:
            return Retry(
                wait=f"{what} waiting for run {record.dagster_run.run_id[:8]} ({record.dagster_run.status.value})"
            )
    after = records[0].dagster_run.run_id if records else ""
    failures = []
    for record in records:
        if record.dagster_run.status not in FAILED or record.dagster_run.run_id == materialized_by:
            break
        failures.append(record)
    if not failures:
        return Retry(after=after)
    last = failures[0]
    ended = last.end_time or last.update_timestamp.timestamp()
    due_in = ended + backoff.delay(len(failures)) - now
    if due_in > 0:
        return Retry(
            attempt=len(failures),
            after=after,
            wait=f"retry {len(failures)} of {what} after run {last.dagster_run.run_id[:8]} failed, in {due_in:.0f} s",
        )
    return Retry(attempt=len(failures), after=after)


@dataclass(frozen=True)
class Work:
    name: str
    kind: str  # PENDING_RESYNC | DIRTY_RECORDS | INITIAL_LOAD (cdc_assets/actions.py)
    reason: str
    source: str  # the run whose materialization asked for it ("" when there is none)
    dirty: int = 0
    deferred_until: str = ""  # a resync only damaged landing files asked for: not before (ISO; module docstring)

    def deferred(self, now: float) -> str | None:
        """Why the work waits for its time (None: it does not)."""
        if not self.deferred_until or datetime.fromisoformat(self.deferred_until).timestamp() <= now:
            return None
        return (
            f"{self.kind.replace('_', ' ')} of {self.name} deferred until {self.deferred_until}: only damaged "
            f"landing files asked for it (one such resync per object per damaged_resync_every)"
        )

    @property
    def mode(self) -> str:
        """The replica's op config mode: the action asked for this work."""
        return ASKED_FOR[self.kind].name

    def describe(self) -> str:
        return f"{self.name}: {self.kind.replace('_', ' ')} ({self.reason})"


@dataclass(frozen=True)
class Planned:
    work: Work
    retry: Retry

    @property
    def ready(self) -> bool:
        return self.retry.wait is None


def latest_materialization(instance: dg.DagsterInstance, name: str) -> tuple[str | None, dict]:
    """(run id, metadata values) of the replica's latest materialization; (None, {}) if it has none."""
    return _run_and_metadata(instance.get_latest_materialization_event(replica_key(name)))


def latest_materializations(instance: dg.DagsterInstance, names: list[str]) -> dict[str, tuple[str | None, dict]]:
    """`latest_materialization` of every replica in `names`, in one query (a sensor asks for all of them)."""
    events = instance.get_latest_materialization_events([replica_key(n) for n in names])
    return {n: _run_and_metadata(events.get(replica_key(n))) for n in names}


def _run_and_metadata(event: dg.EventLogEntry | None) -> tuple[str | None, dict]:
    if event is None or event.asset_materialization is None:
        return None, {}
    return event.run_id, {k: v.value for k, v in event.asset_materialization.metadata.items()}


def needed_work(
    instance: dg.DagsterInstance,
    warehouse: DeltaWarehouse,
    replication: ReplicationConfig,
    name: str,
    latest: tuple[str | None, dict] | None = None,
    now: float | None = None,
) -> Work | None:
    """`latest`: the replica's `latest_materialization`, if the caller has it. A deferred resync gives way to the
    replica's dirty records (module docstring)."""
    now = time.time() if now is None else now
    run_id, meta = latest or latest_materialization(instance, name)
    if replication.initial_load and not warehouse.exists(name) and replication.object(name).source != POLL_SOURCE:
        return Work(name, INITIAL_LOAD, "no table yet", run_id or "")
    resync = None
    if meta.get(META_RESYNC):
        deferred = str(meta.get(META_RESYNC_DEFERRED) or "")
        resync = Work(name, PENDING_RESYNC, str(meta[META_RESYNC]), run_id or "", deferred_until=deferred)
        if not resync.deferred(now):
            return resync
    if dirty := int(meta.get(META_DIRTY) or 0):
        return Work(name, DIRTY_RECORDS, f"{dirty} dirty records", run_id or "", dirty)
    return resync


def runs_carrying(instance: dg.DagsterInstance, work: Work, limit: int = 20) -> list[dg.RunRecord]:
    """Runs that did or do `work`, newest first. Every run that includes a replica with no table loads it."""
    tags = {object_tag(work.name): "1"} if work.kind == INITIAL_LOAD else {work_tag(work.name): carried_by(work.kind)}
    return list(instance.get_run_records(filters=dg.RunsFilter(tags=tags), limit=limit))


def plan(
    instance: dg.DagsterInstance, warehouse: DeltaWarehouse, replication: ReplicationConfig, now: float | None = None
) -> list[Planned]:
    """Every replica's pending work, and whether to ask for it now."""
    now = time.time() if now is None else now
    backoff = Backoff.from_options(replication.options)
    latest = latest_materializations(instance, replication.names)
    out = []
    for name in replication.names:
        if (work := needed_work(instance, warehouse, replication, name, latest[name], now)) is None:
            continue
        if wait := work.deferred(now):
            out.append(Planned(work, Retry(wait=wait)))
            continue
        retry = retry_state(
            runs_carrying(instance, work),
            f"{work.kind.replace('_', ' ')} of {name}",
            backoff,
            now=now,
            materialized_by=work.source or None,
        )
        out.append(Planned(work, retry))
    return out


def replicas_to_include(
    instance: dg.DagsterInstance, replication: ReplicationConfig, ce_state: IngestState
) -> set[str]:
    """Replicas a landing run must include besides those its files name: holding a transaction back (the new
    files may close it), possibly holding rows of the newest transaction, or with ingested rows not applied yet
    (ingested by a run that did not include them: files that landed after the sensor's tick)."""
    entity_seq = ce_state.entity_seq
    newest = holders(ce_state, set(replication.names))
    out = set()
    latest = latest_materializations(instance, replication.names)
    for name in replication.names:
        _, meta = latest[name]
        if (
            meta.get(META_HELD)
            or name in newest
            or int(entity_seq.get(name, 0)) > int(meta.get(META_APPLIED_THROUGH) or 0)
        ):
            out.add(name)
    return out
