"""Run actions: what one run of a replica asset does, each declared once, here.

A replica run does one action, named by its op config `mode` (`ReplicaRunConfig`); the name is also the `cdc/mode`
tag of the run asking for it (cdc_assets/names.py) and the `mode` its materialization reports. Each `Action`
entry says

- what it does: `step`, the function run before the apply step (it reads the org and commits on its own), and
  `applies_events`, the objects (by their `source`) whose run then applies change_events: the apply step, the only
  one that needs Spark;
- what it needs: `full_copy` (its step replaces the replica with a full copy from the org: describe() is asked
  anew, and columns `hash:` covers since are rewritten instead of refused), `asks_describe` (describe() is asked
  anew before its step, and what changed is settled: replication/field_access.py), `api_budget` (its step spends the org's
  daily API requests: the sensors asking for it hold back while the budget is nearly spent). Every action runs in
  the replica's pool (one writer per table: cdc_assets/assets.py `replica_pool`);
- what it covers: the work the sensors find (sensors/work.py) that a run of it does (`covers`), and the work they
  ask it for (`asked_for`), so that no sensor asks for work that a run in flight already does;
- `job`: the operator job `<action>_objects` it gets in the UI (cdc_assets/operate/jobs.py), for objects of
  `job_sources`.

The asset body (cdc_assets/assets.py) looks the run's action up in `ACTIONS` and calls `run_step`; the sensors'
planner and requests, their run tags and the operator jobs are derived from the same entries. Two rules hold
whatever the action:

- **A replica with no table is loaded first** (with `initial_load` on, or when the run applies no events: a polled
  object starts from a full copy): the step is the resync's, reported as `initial_load`.
- **Hand-off.** For the actions with `handoff`, the first run of a cdc object whose replica still holds an active
  poll cursor (replication.yaml switched it from poll) polls once more instead of its step (`poll_handoff`), then
  applies the events (replication/poll/run.py).

**Adding an action** is one entry in `ACTIONS` and its step function (docs/development/index.md, "How to add a run
action").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import dagster as dg
from deltalake import DeltaTable

from replication.config import CDC_SOURCE, POLL_SOURCE, ReplicationOptions, SObjectConfig
from replication.formulas.refresh import refresh_formulas
from replication.poll.run import poll, poll_state
from replication.refetch import SyncResult, reconcile, resync
from replication.run import ReplicaRun

# The work the sensors find a replica needs (sensors/work.py), each named as the runs that do it are tagged (work
# tag, `cdc/mode`): a resync an overflow left pending, dirty records, no table yet. Any run of a replica with no
# table loads it first, so the initial load is in no action's `covers`: every run of the replica carries it.
PENDING_RESYNC, DIRTY_RECORDS, INITIAL_LOAD = "resync", "reconcile", "initial_load"
POLL_HANDOFF = "poll_handoff"  # the `mode` a hand-off run reports (module docstring)
SOURCES = frozenset({CDC_SOURCE, POLL_SOURCE})


@dataclass(frozen=True)
class ActionRun(ReplicaRun):
    """The engine's run (replication/run.py) and the run's op config: what an action's step works with."""

    config: ReplicaRunConfig


@dataclass(frozen=True)
class Step:
    """What a run's step did: `mode`, the name its materialization reports (the action's, `initial_load` or
    `poll_handoff`), and what it read from the org (None: nothing ran before the apply step)."""

    mode: str
    sync: SyncResult | None = None


@dataclass(frozen=True)
class Action:
    """One run action: its name, its step, what it needs and covers, its operator job (module docstring)."""

    name: str  # op config `mode`, run tag `cdc/mode`, materialization `mode`
    summary: str  # what it does, in a few words (the replica's description in the UI)
    step: Callable[[ActionRun], Step]
    applies_events: frozenset[str] = SOURCES  # sources whose run applies change_events after the step (Spark)
    full_copy: bool = False
    asks_describe: bool = False  # describe() is asked before its step (fields added, hidden or deleted since)
    api_budget: bool = True
    handoff: bool = False
    asked_for: str | None = None  # the work the sensors ask this action for (its run's work tag)
    covers: frozenset[str] = frozenset()  # the work a run of it does, `asked_for` included
    job: str = ""  # what its operator job does, for the job's description ("": no job)
    job_sources: frozenset[str] = SOURCES

    def applies_events_to(self, sobject: SObjectConfig) -> bool:
        return sobject.source in self.applies_events


def _apply(run: ActionRun) -> Step:
    """Nothing before the apply step; a polled object has no events: its way in is the poll."""
    return _poll(run) if run.sobject.source == POLL_SOURCE else Step(APPLY.name)


def _reconcile(run: ActionRun) -> Step:
    return Step(RECONCILE.name, reconcile(run))


def _resync(run: ActionRun) -> Step:
    return Step(INITIAL_LOAD if run.table is None else RESYNC.name, resync(run))


def _poll(run: ActionRun, *, handoff: bool = False) -> Step:
    run.org()
    sync = poll(run, compare_ids=run.config.compare_ids, confirm_deletes=run.config.confirm_deletes, handoff=handoff)
    return Step(POLL_HANDOFF if handoff else POLL.name, sync)


def _formulas(run: ActionRun) -> Step:
    if not run.sobject.formulas:
        raise dg.Failure(
            f"{run.sobject.name} keeps no formula fields: add a `formulas` section for it in "
            "replication.yaml (README 'Formula fields') and reload the code location"
        )
    run.org()
    sync = refresh_formulas(run, full=run.config.formulas_full)
    return Step(FORMULAS.name, sync)


def _describe(run: ActionRun) -> Step:
    """Nothing of its own: the asset body asks describe() and settles what changed before every step of an action
    with `asks_describe` (replication/field_access.py)."""
    return Step(DESCRIBE.name)


APPLY = Action(
    "apply",
    "CDC",
    _apply,
    applies_events=frozenset({CDC_SOURCE}),
    api_budget=False,  # a describe() when events name a field the replica lacks, no more
    handoff=True,
    asked_for=INITIAL_LOAD,  # a run of a replica with no table loads it first, whatever its action
)
RECONCILE = Action(
    "reconcile",
    "fetch dirty records",
    _reconcile,
    handoff=True,
    asked_for=DIRTY_RECORDS,
    covers=frozenset({DIRTY_RECORDS}),
    job="fetch its dirty records by id, then apply the events.",
    job_sources=frozenset({CDC_SOURCE}),
)
RESYNC = Action(
    "resync",
    "Bulk API 2.0",
    _resync,
    full_copy=True,
    asked_for=PENDING_RESYNC,
    covers=frozenset({PENDING_RESYNC, DIRTY_RECORDS}),  # it rewrites every row, dirty ones too
    job="a Bulk API 2.0 snapshot replaces the replica, then the events after it apply.",
)
POLL = Action(
    "poll",
    "records changed since a SystemModstamp cursor, for objects without CDC",
    _poll,
    applies_events=frozenset(),
)
FORMULAS = Action(
    "formulas",
    "refresh the formula columns, when replication.yaml keeps them",
    _formulas,
    applies_events=frozenset({CDC_SOURCE}),
)
DESCRIBE = Action(
    "describe",
    "ask describe() again: columns for fields added, marks for fields hidden or deleted",
    _describe,
    asks_describe=True,
    handoff=True,
    job="ask describe() again: columns for fields added in the org (backfilled from it), marks for fields hidden "
    "or deleted; then apply the events.",
)
ACTIONS: dict[str, Action] = {a.name: a for a in (APPLY, RECONCILE, RESYNC, DESCRIBE, POLL, FORMULAS)}


def run_step(action: Action, run: ActionRun, *, initial: bool) -> Step:
    """The run's step: the initial load of a replica with no table (`initial`: `loads_first`), else the hand-off
    poll of a cdc object its poll has not handed off yet, else the action's own (module docstring)."""
    if initial:
        return _resync(run)
    if action.handoff and run.sobject.source == CDC_SOURCE and (p := poll_state(run.warehouse, run.table)) and p.active:
        return _poll(run, handoff=True)
    return action.step(run)


def loads_first(action: Action, sobject: SObjectConfig, table: DeltaTable | None, options: ReplicationOptions) -> bool:
    """Whether the run starts with an initial load: no table yet, and `initial_load` on or no events to apply."""
    return table is None and (options.initial_load or not action.applies_events_to(sobject))


ASKED_FOR: dict[str, Action] = {a.asked_for: a for a in ACTIONS.values() if a.asked_for}  # work -> its action


def carried_by(work: str) -> list[str]:
    """The work tags of the runs that do `work` (sensors/work.py finds them by these)."""
    return sorted(a.asked_for for a in ACTIONS.values() if work in a.covers and a.asked_for)


class ReplicaRunConfig(dg.Config):
    """A replica run's op config: its action, and what some actions take."""

    mode: Literal[tuple(ACTIONS)] = APPLY.name  # type: ignore[valid-type]  # the names of ACTIONS
    formulas_full: bool = False  # formulas: read every record's formula values, whatever full_every says
    compare_ids: bool = False  # poll: compare Ids with the org now (hard deletes), whatever the schedule
    # poll: compare Ids now and apply its deletes even beyond poll_max_delete_share (check poll_hard_deletes failed
    # and the org really lost those records)
    confirm_deletes: bool = False
    # Overrides replication.yaml for this run (the run's first replica step decides for all: replication/closure.py).
    transaction_close_after: float | None = None
