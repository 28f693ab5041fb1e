"""Two landing runs in flight at once apply in the order they were created (cdc_assets/run_order.py).

The newer run's ingest step, once it has committed and recorded change_events' materialization (so the landing
sensor may request the next run), waits until the older apply run in flight has ended its step of the same
replica; then its replica steps run. Runs here are Dagster's real `materialize()` on an on-disk instance (the
newer run executes in a thread while the test plays the older run's steps in the instance, as its worker would).
"""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepSuccessData
from dagster._core.test_utils import create_run_for_test
from event_lines import event
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.names import CHANGE_EVENTS_KEY, replica_key
from cdc_assets.run_order import step_key, unfinished_steps
from demo.instance import open_instance, write_dagster_home
from sensors.landing_zone import SENSOR_NAME

NAME, OTHER = "Account", "Contact"
ID = "001000000000001AAA"
WAIT_SECONDS = 120
INGEST, REPLICA = step_key(CHANGE_EVENTS_KEY), step_key(replica_key(NAME))


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    platform = Platform(tmp_path, sample_dir / "describe", [NAME, OTHER], TEST_SPARK_CONF, close_after=0)
    # The shipped instance settings, on disk: read and written by two threads.
    with open_instance(write_dagster_home(tmp_path / "dagster_home")) as instance:
        platform.instance = instance
        yield platform


def landing_request(platform: Platform) -> dg.RunRequest:
    platform.land([event(NAME, "CREATE", [ID], int(time.time() * 1000), Name="Acme")])
    [request] = platform.sensor_requests(SENSOR_NAME)
    return request


def older_run(platform: Platform, request: dg.RunRequest, *, names: list[str]) -> dg.DagsterRun:
    """An apply run in flight, created before the one under test, selecting change_events and `names`."""
    return create_run_for_test(
        platform.instance,
        status=dg.DagsterRunStatus.STARTED,
        tags=request.tags,
        asset_selection=frozenset({CHANGE_EVENTS_KEY, *(replica_key(n) for n in names)}),
    )


def step_ended(platform: Platform, run: dg.DagsterRun, step: str) -> None:
    """`run`'s worker starts and ends `step`, as Dagster records it."""
    for kind, data in ((DagsterEventType.STEP_START, None), (DagsterEventType.STEP_SUCCESS, StepSuccessData(1.0))):
        event = DagsterEvent(kind.value, job_name=run.job_name, step_key=step, event_specific_data=data)
        platform.instance.report_dagster_event(event, run.run_id, timestamp=time.time())


def execute_in_thread(platform: Platform, request: dg.RunRequest) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def target() -> None:
        out["result"] = dg.materialize(
            [*platform.executable_assets(), *platform.defs.asset_checks],
            selection=request.asset_selection,
            resources=platform.defs.resources,
            instance=platform.instance,
            tags=request.tags,
        )

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def run_logging(platform: Platform, text: str, *, besides: str) -> dg.DagsterRun:
    """The run other than `besides` that logs `text`, once it has."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for run in platform.instance.get_runs():
            if run.run_id != besides and any(
                text in (e.user_message or "") for e in platform.instance.all_logs(run.run_id)
            ):
                return run
        time.sleep(0.2)
    raise AssertionError(f"no run logged {text!r} in {WAIT_SECONDS} s")


def test_a_landing_run_applies_a_replica_only_after_the_older_run_in_flight_has_applied_it(platform):
    request = landing_request(platform)
    older = older_run(platform, request, names=[NAME])
    step_ended(platform, older, INGEST)  # it has ingested; its Account step is still to come

    thread, out = execute_in_thread(platform, request)
    newer = run_logging(platform, f"run {older.run_id[:8]}: {NAME}", besides=older.run_id)

    # Ingested and recorded (the sensor may request the next run), and its replica step waits.
    assert platform.instance.get_latest_materialization_event(CHANGE_EVENTS_KEY).run_id == newer.run_id
    time.sleep(1.0)
    assert thread.is_alive()
    assert REPLICA not in {s.step_key for s in platform.instance.get_run_step_stats(newer.run_id)}
    assert platform.delta_table(NAME) is None

    step_ended(platform, older, REPLICA)
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive() and out["result"].success
    assert platform.rows(NAME)[ID]["Name"] == "Acme"
    assert any(
        "The older runs applied their replicas" in (e.user_message or "")
        for e in platform.instance.all_logs(newer.run_id)
    )


def test_older_runs_that_apply_other_replicas_have_not_ingested_or_ended_are_not_waited_for(platform):
    request = landing_request(platform)
    other = older_run(platform, request, names=[OTHER])  # applies Contact only: the newer run applies Account
    step_ended(platform, other, INGEST)
    not_ingested = older_run(platform, request, names=[NAME])  # it will ingest after the newer run
    ended = older_run(platform, request, names=[NAME])
    step_ended(platform, ended, INGEST)
    platform.instance.report_run_failed(ended, "its worker died")
    assert [unfinished_steps(platform.instance, r, [NAME]) for r in (other, not_ingested, ended)] == [[], [], []]
    waiting = older_run(platform, request, names=[NAME, OTHER])
    step_ended(platform, waiting, INGEST)
    step_ended(platform, waiting, REPLICA)
    assert unfinished_steps(platform.instance, waiting, [NAME, OTHER]) == [OTHER]
    platform.instance.report_run_canceled(waiting)

    thread, out = execute_in_thread(platform, request)
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive() and out["result"].success
    assert platform.rows(NAME)[ID]["Name"] == "Acme"
    run = out["result"].dagster_run
    assert not any("Waiting for older runs" in (e.user_message or "") for e in platform.instance.all_logs(run.run_id))
