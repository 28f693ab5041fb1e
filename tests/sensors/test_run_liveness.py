"""run_liveness_sensor against a real instance (the shipped dagster.yaml) and real processes standing in for run
workers: a run whose worker process is gone is failed and its pool slot freed in one evaluation; a run whose worker
still runs, however long, is left alone; a pid reused by a newer process does not pass for the worker."""

from __future__ import annotations

import json
import subprocess
import time

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import GRPC_INFO_TAG
from dagster._core.test_utils import create_run_for_test

from demo.instance import open_instance, write_dagster_home
from sensors.run_liveness import SENSOR_NAME, WORKER_STARTED, Worker, build_run_liveness_sensor, process_alive
from sensors.work import Backoff, retry_state

POOL = "replica_Account"
LOCAL = json.dumps({"host": "localhost", "port": 4266})


@pytest.fixture
def instance(tmp_path):
    with open_instance(write_dagster_home(tmp_path / "home")) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 1)
        yield instance


@pytest.fixture
def worker():
    """A process standing in for a run worker (a slow one: it runs until killed)."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def started_run(
    instance: dg.DagsterInstance, pid: int, *, status=dg.DagsterRunStatus.STARTED, grpc_info: str = LOCAL
) -> dg.DagsterRun:
    """A run launched to a local code server, holding a slot of POOL, whose worker reported `pid` as Dagster's
    run worker does."""
    run = create_run_for_test(instance, status=status, tags={GRPC_INFO_TAG: grpc_info})
    instance.report_engine_event(f"{WORKER_STARTED} (pid: {pid}).", run, EngineEventData.in_process(pid))
    instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, "salesforce__Account")
    return run


def evaluate(instance: dg.DagsterInstance) -> dg.SensorResult:
    sensor = build_run_liveness_sensor()
    assert sensor.name == SENSOR_NAME
    return sensor(dg.build_sensor_context(instance=instance))


def claimed(instance: dg.DagsterInstance) -> int:
    return len(instance.event_log_storage.get_concurrency_info(POOL).claimed_slots)


def test_a_run_whose_worker_died_is_failed_its_slot_freed_and_its_work_retried(instance, worker):
    run = started_run(instance, worker.pid)
    worker.kill()
    worker.wait()
    assert claimed(instance) == 1

    result = evaluate(instance)

    failed = instance.get_run_by_id(run.run_id)
    assert failed.status == dg.DagsterRunStatus.FAILURE
    assert run.run_id[:8] in result.skip_reason.skip_message
    assert claimed(instance) == 0
    [failure] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert f"run worker (pid {worker.pid}) is gone" in failure.dagster_event.message
    # The sensors' retry path (sensors/work.py) counts it as a failure and asks again after the backoff.
    retry = retry_state(list(instance.get_run_records()), "work", Backoff(first=0))
    assert (retry.attempt, retry.wait) == (1, None)


def test_a_slow_run_whose_worker_is_alive_is_left_alone(instance, worker):
    run = started_run(instance, worker.pid)
    time.sleep(1.5)  # however long it runs: only a process that is gone counts

    result = evaluate(instance)
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    assert claimed(instance) == 1
    assert f"worker pid {worker.pid} alive" in result.skip_reason.skip_message


def test_a_reused_pid_does_not_pass_for_the_worker(worker):
    # The worker reported its pid 5 s ago and died; a process started since under the same pid is not it.
    reported = time.time()
    assert process_alive(Worker(worker.pid, reported_at=reported))
    assert not process_alive(Worker(worker.pid, reported_at=reported - 5))


def test_runs_it_cannot_check_are_left_to_dagster_monitoring(instance, worker):
    remote = started_run(instance, 4242, grpc_info=json.dumps({"host": "code-server.example", "port": 4266}))
    starting = create_run_for_test(instance, status=dg.DagsterRunStatus.STARTING, tags={GRPC_INFO_TAG: LOCAL})

    result = evaluate(instance)
    assert instance.get_run_by_id(remote.run_id).status == dg.DagsterRunStatus.STARTED
    assert instance.get_run_by_id(starting.run_id).status == dg.DagsterRunStatus.STARTING
    assert "not launched to a code server on this host" in result.skip_reason.skip_message
    assert "no worker pid reported yet" in result.skip_reason.skip_message


STEP, WAITER = "salesforce__Account", "changefeed__Account_changefeed"


def claim(instance: dg.DagsterInstance, run: dg.DagsterRun, step: str) -> bool:
    """One claim attempt of `step`, as Dagster's executor retries it while the step waits."""
    return instance.event_log_storage.claim_concurrency_slot(POOL, run.run_id, step).is_claimed


def test_a_step_the_pool_queue_left_unassigned_gets_the_free_slot(instance, worker):
    # Dagster's claim: "no slot free?" then "queue me"; a free between the two assigns nobody (module docstring).
    storage = instance.event_log_storage
    holder, waiter = started_run(instance, worker.pid), started_run(instance, worker.pid)
    storage.free_concurrency_slot_for_step(waiter.run_id, STEP)  # (started_run claims for every run it makes)
    assert claimed(instance) == 1
    assert not storage.has_unassigned_slots(POOL)  # the waiter's check: no free slot ...
    storage.free_concurrency_slot_for_step(holder.run_id, STEP)  # ... the holder's step ends meanwhile ...
    storage.add_pending_step(concurrency_key=POOL, run_id=waiter.run_id, step_key=WAITER, should_assign=False)
    assert not any(claim(instance, waiter, WAITER) for _ in range(3)), "stranded: every slot free, never claimed"

    evaluate(instance)
    assert claim(instance, waiter, WAITER)
    assert claimed(instance) == 1


def test_a_step_waiting_for_a_slot_in_use_keeps_waiting(instance, worker):
    holder, waiter = started_run(instance, worker.pid), started_run(instance, worker.pid)
    instance.event_log_storage.free_concurrency_slot_for_step(waiter.run_id, STEP)
    assert not claim(instance, waiter, WAITER)

    evaluate(instance)
    assert not claim(instance, waiter, WAITER), "one writer per table: the slot is the holder's"
    instance.event_log_storage.free_concurrency_slot_for_step(holder.run_id, STEP)
    assert claim(instance, waiter, WAITER)
