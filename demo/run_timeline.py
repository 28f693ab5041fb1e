"""Where a run's time went, from what the Dagster instance recorded about it: the sensor tick that requested it,
the queue, the run worker's start-up, each step.

The phases of a run the daemon starts (sensor -> QueuedRunCoordinator -> DefaultRunLauncher -> the code server
spawns a run worker), each ending at an event the instance stores:

- **tick**: the sensor tick that requested the run starts (its `dagster/tick` tag names it);
- **requested**: the tick created the run (the sensor's evaluation in the code server, then the run's creation);
- **launched**: the queue handed it to the launcher (`RUN_STARTING`; the coordinator dequeues every
  `dequeue_interval_seconds`);
- **process**: the run worker is up ("Started process for run": a fresh Python that imported Dagster and opened
  the instance);
- **run start**: the worker loaded the code location's definitions (`RUN_START`: `import definitions`, `defs()`);
- **first step**: resources built (the Spark session) and the first step begins (`STEP_START`);
- then each step until its end.

Any phase the run did not go through (a run executed in process has no queue and no worker) is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg
from dagster._core.storage.tags import TICK_ID_TAG

STARTED_PROCESS = "Started process for run"


@dataclass(frozen=True)
class RunTimeline:
    run_id: str
    created: float
    tick: float | None = None
    launched: float | None = None
    process: float | None = None
    run_start: float | None = None
    steps: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # step key -> (start, end)
    sensor: str | None = None

    @property
    def first_step(self) -> float | None:
        return min((start for start, _ in self.steps.values()), default=None)

    def step_start(self, key_part: str) -> float | None:
        """Start of the first step whose key contains `key_part` (e.g. "Account")."""
        return min((s for k, (s, _) in self.steps.items() if key_part in k), default=None)


def run_timeline(instance: dg.DagsterInstance, run_id: str) -> RunTimeline:
    record = instance.get_run_record_by_id(run_id)
    if record is None:
        raise LookupError(f"run {run_id} is not in the instance at {instance.root_directory}")
    marks: dict[str, float] = {}
    steps: dict[str, tuple[float, float | None]] = {}
    for event_record in instance.get_records_for_run(run_id, limit=100_000).records:
        entry = event_record.event_log_entry
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type
        if kind == dg.DagsterEventType.RUN_STARTING:
            marks.setdefault("launched", entry.timestamp)
        elif kind == dg.DagsterEventType.ENGINE_EVENT and (event.message or "").startswith(STARTED_PROCESS):
            marks.setdefault("process", entry.timestamp)
        elif kind == dg.DagsterEventType.RUN_START:
            marks.setdefault("run_start", entry.timestamp)
        elif kind == dg.DagsterEventType.STEP_START and event.step_key:
            steps.setdefault(event.step_key, (entry.timestamp, None))
        elif (
            kind in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE)
            and event.step_key
            and event.step_key in steps
        ):
            steps[event.step_key] = (steps[event.step_key][0], entry.timestamp)
    run = record.dagster_run
    sensor = run.tags.get("dagster/sensor_name")
    return RunTimeline(
        run_id=run_id,
        created=record.create_timestamp.timestamp(),
        tick=_tick_start(instance, run, sensor),
        steps=steps,
        sensor=sensor,
        **marks,
    )


def _tick_start(instance: dg.DagsterInstance, run: dg.DagsterRun, sensor: str | None) -> float | None:
    """When the sensor tick that requested `run` started; None for a run no sensor requested."""
    tick_id = run.tags.get(TICK_ID_TAG)
    if sensor is None or tick_id is None:
        return None
    for state in instance.all_instigator_state():
        if state.name != sensor:
            continue
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=200):
            if str(tick.tick_id) == tick_id:
                return tick.timestamp
    return None
