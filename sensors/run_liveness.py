"""run_liveness_sensor: runs whose run worker is gone are ended, so their work is requested again.

Why a sensor of our own. Dagster's run monitoring (dagster.yaml `run_monitoring`, the daemon's MONITORING loop)
ends a run stuck in STARTING after `start_timeout_seconds` and one stuck in CANCELING after
`cancel_timeout_seconds`, but it can tell whether a STARTED run's worker is alive only through the run launcher's
`check_run_worker_health`, and the `DefaultRunLauncher` this platform uses (a run is a subprocess of the code
server) does not support it. When the daemon's process group dies (SIGKILL, OOM killer, a host restart under a
supervisor), the code server and its run workers die with it, nothing reports the runs' end, and they stay STARTED
for ever: the landing sensor and the reconciliation planner wait for them (`sensors/work.py`), and their pool
slots block the tables they wrote. A `max_runtime_seconds` would end them, but also a live 10M-row resync.

How it decides. Every run worker reports its own pid first thing (Dagster's engine event "Started process for run
(pid: N)", written by the worker before the run turns STARTED). For each run in flight (STARTING, STARTED,
CANCELING) whose worker reported it, the sensor asks the operating system whether that process still exists and
is the same one: it started no later than the event was written (a pid reused by a later process started after),
and is not a zombie. Only a process that is gone counts as dead, so a slow run (a resync of 10M rows, a step
waiting for its pool, a JVM in a long GC) is never taken for a dead one; there is no heartbeat to miss. A dead
run is marked failed with a message naming its worker (`instance.report_run_failed`) and its pool slots are freed;
the sensors' existing retry path (`sensors/work.py`, `retry_backoff_seconds`) then requests its work again.

Where it applies. The check is valid only on the host where the run workers live: sensors are evaluated in the
code server, and the `DefaultRunLauncher` starts a run worker as a child process of the code server the run was
launched to (the run's `.dagster/grpc_info` tag names it). A run launched to a code server on another host is left
alone, as are runs of launchers that support `check_run_worker_health` (Dagster's monitoring checks those).
The pid check reads `/proc` (Linux); elsewhere the sensor checks nothing and says so.

**Pool queues left stranded.** Dagster's pool queue (its event log storage, SQLite or Postgres alike) can strand a
step: a step that finds no free slot is queued unassigned, and a slot freed later assigns the oldest unassigned step.
The two are separate statements, not one transaction: when the holder frees its slot between the waiting step's
"no free slot" check and its insert into the queue, the free finds nobody to assign, the step is queued after it,
and nothing ever assigns it; its run waits for that pool for good with every slot free (under `make e2e`, a
changefeed step queued 20 ms after the replica step it waited for had ended). Each evaluation also gives every
pool whose slots are neither claimed nor promised to a step its waiting steps (`assign_stranded`), as the free
would have. Should a free assign a step at the same moment, two steps may hold the pool's slot: the pool's host
lock (resources/pool_lock.py) still runs them one after the other, so only liveness is restored, never exclusivity
relaxed.

What is left to Dagster's monitoring: a run whose worker died before reporting its pid (it stays STARTING, ended
after `start_timeout_seconds`), and the pool slots of runs that ended any other way (`free_slots_after_run_end_seconds`).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from dagster._core.storage.event_log import SqlEventLogStorage
from dagster._core.storage.tags import GRPC_INFO_TAG

SENSOR_NAME = "run_liveness_sensor"
WORKER_STARTED = "Started process for run"  # Dagster's engine event, written by the run worker itself
WATCHED = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
PROC = Path("/proc")
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
START_TIME_SLACK_SECONDS = 1.0  # /proc/stat's boot time has whole seconds


@dataclass(frozen=True)
class Worker:
    """A run worker as it reported itself: its pid, and when it said so (epoch seconds)."""

    pid: int
    reported_at: float


def run_worker(instance: dg.DagsterInstance, run_id: str) -> Worker | None:
    """The run's worker, from its latest "Started process for run (pid: N)" engine event (a resumed run has one per
    worker); None before it wrote one."""
    worker = None
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        if event is None or not (event.message or "").startswith(WORKER_STARTED):
            continue
        if (pid := event.engine_event_data.metadata.get("pid")) is not None:
            worker = Worker(int(str(pid.value)), entry.timestamp)  # Dagster writes the pid as text
    return worker


def _boot_time() -> float:
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise RuntimeError(f"{PROC / 'stat'} has no btime line")


def process_alive(worker: Worker) -> bool:
    """Whether `worker`'s process still runs: the pid exists, is not a zombie, and started no later than the worker
    reported it (else the pid was reused by a newer process)."""
    try:
        stat = (PROC / str(worker.pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime field 22
    state, start_ticks = fields[0], int(fields[19])
    if state in ("Z", "X"):
        return False
    started = _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK")
    return started <= worker.reported_at + START_TIME_SLACK_SECONDS


def launched_here(run: dg.DagsterRun) -> bool:
    """Whether the run was launched to a code server on this host (so its worker is a process here)."""
    info = run.tags.get(GRPC_INFO_TAG)
    if not info:
        return False
    grpc = json.loads(info)
    if grpc.get("socket"):
        return True
    return grpc.get("host") in LOCAL_HOSTS | {socket.gethostname(), socket.getfqdn()}


def end_run(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> bool:
    """Mark `run` failed with `message` and free its pool slots, unless it ended meanwhile; whether it did."""
    current = instance.get_run_by_id(run.run_id)
    if current is None or current.is_finished:
        return False
    instance.report_run_failed(current, message)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    return True


@dataclass(frozen=True)
class Verdict:
    run: dg.DagsterRun
    dead: bool
    why: str


def judge(instance: dg.DagsterInstance, run: dg.DagsterRun) -> Verdict:
    """Whether `run`'s worker is known to be gone, and why (or why it cannot tell)."""
    short = run.run_id[:8]
    if not launched_here(run):
        return Verdict(run, False, f"run {short} was not launched to a code server on this host: not checked")
    worker = run_worker(instance, run.run_id)
    if worker is None:
        return Verdict(
            run,
            False,
            f"run {short} ({run.status.value}): no worker pid reported yet (Dagster's "
            f"start timeout ends it if none ever is)",
        )
    if process_alive(worker):
        return Verdict(run, False, f"run {short} ({run.status.value}): worker pid {worker.pid} alive")
    return Verdict(run, True, f"run {short} ({run.status.value}): its run worker (pid {worker.pid}) is gone")


def dead_runs(instance: dg.DagsterInstance) -> list[Verdict]:
    """A verdict for every run in flight."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=WATCHED))
    return [judge(instance, run) for run in runs]


def assign_stranded(instance: dg.DagsterInstance) -> dict[str, int]:
    """Assign waiting steps of every pool with a slot nobody claims or was assigned (module docstring); how many
    steps were assigned, per pool."""
    storage = instance.event_log_storage
    # Dagster's pool queue, and `assign_pending_steps`, are its SQL event log storage's (SQLite, Postgres).
    if not (isinstance(storage, SqlEventLogStorage) and storage.supports_global_concurrency_limits):
        return {}
    assigned = {}
    for pool in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(pool)
        free = info.slot_count - info.assigned_step_count
        stranded = min(free, info.pending_step_count)
        if stranded > 0:
            for _ in range(stranded):
                storage.assign_pending_steps([pool])  # the oldest waiting step of the highest priority, as a free
            assigned[pool] = stranded
    return assigned


def build_run_liveness_sensor(
    *, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> dg.SensorDefinition:
    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=15,
        default_status=default_status,
        description="Marks runs whose run worker process is gone (a crash of the daemon, code server or "
        "worker) as failed and frees their pool slots, so the landing and reconciliation "
        "sensors request their work again. A slow run is never ended: only a process that "
        "no longer exists counts. Also assigns pool slots that Dagster's queue left free "
        "while steps wait for them.",
    )
    def run_liveness_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        for pool, steps in assign_stranded(context.instance).items():
            context.log.warning(
                f"pool {pool}: {steps} waiting steps had a free slot nobody assigned them "
                f"(Dagster's queue race); assigned now"
            )
        if context.instance.run_launcher.supports_check_run_worker_health:
            return dg.SensorResult(
                skip_reason="the run launcher reports worker health itself: Dagster's run monitoring ends dead runs"
            )
        if not (PROC / "stat").exists():
            return dg.SensorResult(skip_reason=f"no {PROC} on this host: run workers cannot be checked")
        verdicts = dead_runs(context.instance)
        ended = []
        for verdict in verdicts:
            if verdict.dead and end_run(
                context.instance,
                verdict.run,
                f"{verdict.why}: the run is marked failed and its pool slots freed; "
                f"the sensors request its work again after their retry backoff",
            ):
                context.log.warning(f"{verdict.why}: marked failed, pool slots freed; its work will be requested again")
                ended.append(verdict.run.run_id[:8])
        if ended:
            return dg.SensorResult(skip_reason=f"ended {len(ended)} runs whose worker is gone: {', '.join(ended)}")
        return dg.SensorResult(skip_reason="; ".join(v.why for v in verdicts) or "no run in flight")

    return run_liveness_sensor
