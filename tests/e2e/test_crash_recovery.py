"""Crashes of the orchestrator under a busy workload, with nothing done by hand.

`dagster-daemon run` runs alone, as a supervisor (systemd, Kubernetes) runs it; it starts the code server, whose
children are the run workers. While the workload lands files:
- one run worker is SIGKILLed mid-run (its code server lives and reports the run failed; Dagster's monitoring frees
  its pool slots; the landing / reconciliation sensors request its work again);
- the daemon's whole process group (daemon, code server, run workers) is SIGKILLed at random moments while runs
  are in flight, and only the daemon is started again: the runs left STARTED are ended by `run_liveness_sensor`,
  those left STARTING by Dagster's start timeout, and their work is requested again.
Each time, the test measures how long it takes from the kill until replication moves again (a replica or
change_events materialized by a run created after the kill), then lets the platform settle and compares every
replica with the org, record by record.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import dagster as dg
import pytest
from org_compare import differences

from cdc_assets.names import CHANGE_EVENTS_KEY, replica_key
from demo.instance import STORAGES
from sensors.run_liveness import run_worker

# On SQLite and on PostgreSQL (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("storage", STORAGES, indirect=True, scope="session")]

RATE = 30  # transactions per second: a landing file every roll (3 s), runs always queued or in flight
RECOVERY_LIMIT_SECONDS = 240  # the test fails beyond this; the goal (README) is under two minutes
GROUP_KILLS = 3
SEED = int(os.environ.get("CDC_CRASH_SEED", time.time()))


@pytest.fixture(scope="module")
def loaded(daemon_stack):
    """The daemon-only stack once every replica's initial load is done."""
    daemon_stack.workload.run(changes=100)
    print(
        f"\ninitial load under dagster-daemon settled in {daemon_stack.wait_settled(timeout_seconds=900):.0f} s "
        f"(random seed {SEED}: CDC_CRASH_SEED)"
    )
    return daemon_stack


def asset_keys(stack) -> list[dg.AssetKey]:
    return [CHANGE_EVENTS_KEY, *[replica_key(n) for n in stack.objects]]


def moving_since(stack, instance: dg.DagsterInstance, killed_at: float) -> bool:
    """Whether a run created after `killed_at` has materialized a replica or change_events."""
    for key in asset_keys(stack):
        event = instance.get_latest_materialization_event(key)
        if event is None or event.timestamp <= killed_at:
            continue
        record = instance.get_run_record_by_id(event.run_id)
        if record and record.create_timestamp.timestamp() > killed_at:
            return True
    return False


def wait_moving(stack, killed_at: float) -> float:
    """Seconds from `killed_at` until replication moves again."""
    while time.time() - killed_at < RECOVERY_LIMIT_SECONDS:
        with stack.instance() as instance:
            if moving_since(stack, instance, killed_at):
                return time.time() - killed_at
        time.sleep(1)
    pytest.fail(f"replication did not move again within {RECOVERY_LIMIT_SECONDS} s of the kill: {stack.unsettled()}")


def wait_for_run(
    stack, statuses: list[dg.DagsterRunStatus], *, with_worker: bool = False, timeout_seconds: float = 300
) -> dg.DagsterRun:
    """A run in one of `statuses` (whose worker reported its pid, with `with_worker`)."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        with stack.instance() as instance:
            for run in instance.get_runs(filters=dg.RunsFilter(statuses=statuses)):
                if not with_worker or run_worker(instance, run.run_id):
                    return run
        time.sleep(0.5)
    pytest.fail(f"no run {[s.value for s in statuses]} within {timeout_seconds:.0f} s: {stack.unsettled()}")


def ended_after(stack, runs: list[dg.DagsterRun], killed_at: float) -> str:
    """How long after `killed_at` each of `runs` ended (by the time replication moves, they should have)."""
    with stack.instance() as instance:
        records = [instance.get_run_record_by_id(r.run_id) for r in runs]
    return (
        ", ".join(
            f"{r.dagster_run.status.value} {r.end_time - killed_at:.0f} s"
            if r.end_time
            else f"{r.dagster_run.status.value} (not ended yet)"
            for r in records
        )
        or "(none)"
    )


def workload_thread(stack, changes: int) -> threading.Thread:
    thread = threading.Thread(target=stack.workload.run, kwargs={"changes": changes, "rate": RATE}, daemon=True)
    thread.start()
    return thread


def assert_replicas_equal_the_org(stack, thread: threading.Thread, started: float) -> None:
    thread.join()
    settle = stack.wait_settled(timeout_seconds=900)
    print(f"settled {settle:.0f} s after the workload ended ({time.monotonic() - started:.0f} s in all)")
    for name in stack.objects:
        assert differences(stack.emu, name, stack.rows(name), limit=20) == [], name
    with stack.instance() as instance:
        failures = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        print(
            f"{len(failures)} runs failed (killed, then retried): "
            + "; ".join(f"{r.run_id[:8]} {r.tags.get('cdc/reason', '')[:40]}" for r in failures[:10])
        )


def test_a_run_worker_killed_mid_run_is_failed_and_its_work_done_again(loaded):
    stack, rng = loaded, random.Random(SEED)
    started = time.monotonic()
    thread = workload_thread(stack, changes=RATE * 60)
    run = wait_for_run(stack, [dg.DagsterRunStatus.STARTED], with_worker=True)
    time.sleep(rng.uniform(0.5, 4))
    with stack.instance() as instance:
        worker = run_worker(instance, run.run_id)
        status = instance.get_run_by_id(run.run_id).status
    os.kill(worker.pid, signal.SIGKILL)
    killed_at = time.time()
    print(
        f"\nkilled run worker {worker.pid} of run {run.run_id[:8]} ({status.value}, "
        f"{run.tags.get('cdc/reason', '')[:60]})"
    )

    moving = wait_moving(stack, killed_at)
    with stack.instance() as instance:
        ended = instance.get_run_record_by_id(run.run_id)
    assert ended.dagster_run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.SUCCESS)
    print(
        f"run {run.run_id[:8]} ended {ended.dagster_run.status.value} "
        f"{(ended.end_time or killed_at) - killed_at:.0f} s after the kill; replication moving again after "
        f"{moving:.0f} s"
    )
    assert_replicas_equal_the_org(stack, thread, started)


def test_killing_the_daemon_process_group_at_random_moments_loses_nothing(loaded):
    stack, rng = loaded, random.Random(SEED + 1)
    started = time.monotonic()
    thread = workload_thread(stack, changes=RATE * 240)
    recoveries = []
    for kill in range(1, GROUP_KILLS + 1):
        wait_for_run(stack, [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])
        time.sleep(rng.uniform(0, 15))
        with stack.instance() as instance:
            in_flight = instance.get_runs(
                filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])
            )
        killed_at = stack.kill_process_group()
        stack.restart_daemon()  # as a supervisor: the daemon only, at once
        moving = wait_moving(stack, killed_at)
        recoveries.append(moving)
        print(
            f"kill {kill}: daemon process group killed with runs in flight "
            f"[{', '.join(f'{r.run_id[:8]} {r.status.value}' for r in in_flight)}]; replication moving again "
            f"{moving:.0f} s later; the dead runs ended after {ended_after(stack, in_flight, killed_at)}"
        )
    print(
        f"kill -> replication moving again: {', '.join(f'{s:.0f}' for s in recoveries)} s (max {max(recoveries):.0f} s)"
    )
    assert_replicas_equal_the_org(stack, thread, started)
    with stack.instance() as instance:
        ended = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        by_liveness = [
            r
            for r in ended
            if any(
                "run worker (pid" in (e.dagster_event.message or "")
                for e in instance.all_logs(r.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
            )
        ]
    print(f"{len(by_liveness)} runs ended by run_liveness_sensor")
