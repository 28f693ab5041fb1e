"""What the UI shows of a replica while events keep landing: its latest materialization and its checks' results.

The asset graph reads a replica's state from the instance: "Materializing…" while any run selecting it is queued or
in flight, and its checks as the latest execution of each (Dagster records a run's planned check evaluations when
the run is created, so a queued run turns all six "in progress": "0 / 6 Passed"). A landing sensor that
requested the next landing run while one was running would keep one run queued under a steady landing rate, and
no replica would ever show its checks. Runs here are created as the daemon creates them (`create_run_for_job`, which
records the plan) and executed with Dagster's real `materialize()`; the statuses are read from the event log the UI
reads.
"""

from __future__ import annotations

import time

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.test_utils import create_run_for_test
from event_lines import event
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import CHECKS
from cdc_assets.names import TAG_REASON, replica_key
from sensors.landing_zone import REASON_FILES, SENSOR_NAME

NAME = "Account"
ID = "001000000000001AAA"


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", [NAME], TEST_SPARK_CONF, close_after=0)


def tick(platform: Platform, cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=platform.instance, cursor=cursor, definitions=platform.defs, resources=platform.defs.resources
    )
    return platform.defs.get_sensor_def(SENSOR_NAME)(context)


def submit(platform: Platform, request: dg.RunRequest) -> dg.DagsterRun:
    """The run the daemon creates for `request`, with its planned materializations and check evaluations (before
    it submits it to the queue: QUEUED would need a code location origin)."""
    job = platform.defs.resolve_implicit_global_asset_job_def()
    return platform.instance.create_run_for_job(
        job,
        status=dg.DagsterRunStatus.NOT_STARTED,
        tags=request.tags,
        asset_selection=frozenset(request.asset_selection),
    )


def execute(platform: Platform, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """`request` run by Dagster's materialize(), with the selected replicas' checks, as a daemon run has them."""
    return dg.materialize(
        [*platform.executable_assets(), *platform.defs.asset_checks],
        selection=request.asset_selection,
        resources=platform.defs.resources,
        instance=platform.instance,
        tags=request.tags,
    )


def checks_shown(platform: Platform) -> dict[str, str]:
    """Each check's latest execution as the UI resolves it for the replica node: its status, and whether it
    evaluated the replica's latest materialization ("stale" if not)."""
    keys = [dg.AssetCheckKey(replica_key(NAME), name) for name in CHECKS]
    latest = platform.instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    [materialization] = platform.instance.fetch_materializations(replica_key(NAME), limit=1).records
    shown = {}
    for key in keys:
        record = latest.get(key)
        if record is None or record.status == AssetCheckExecutionRecordStatus.PLANNED:
            shown[key.name] = "in progress" if record else "not evaluated"
            continue
        target = record.evaluation.target_materialization_data
        shown[key.name] = record.status.value if target.storage_id == materialization.storage_id else "stale"
    return shown


def test_new_files_wait_for_the_landing_run_in_flight_so_the_replica_shows_its_checks(platform):
    now = int(time.time() * 1000)  # a fresh change: the freshness check passes
    platform.land([event(NAME, "CREATE", [ID], now, Name="Acme")])
    first = tick(platform, None)
    [request] = first.run_requests
    assert execute(platform, request).success
    assert platform.rows(NAME)[ID]["Name"] == "Acme"
    passed = dict.fromkeys(CHECKS, AssetCheckExecutionRecordStatus.SUCCEEDED.value)
    assert checks_shown(platform) == passed

    # The next landing run is running (created by an earlier tick) when more events land.
    busy = create_run_for_test(
        platform.instance,
        status=dg.DagsterRunStatus.STARTED,
        tags={TAG_REASON: REASON_FILES},
        asset_selection=frozenset(request.asset_selection),
    )
    platform.land([event(NAME, "UPDATE", [ID], now + 1000, Name="Acme Corp")])
    waiting = tick(platform, first.cursor)
    for queued in waiting.run_requests:  # what the daemon would create at once
        submit(platform, queued)
    assert checks_shown(platform) == passed, "a queued run shows the checks in progress (0 of 6 passed)"
    assert not waiting.run_requests
    assert f"wait for landing run {busy.run_id[:8]} (STARTED)" in waiting.skip_reason.skip_message

    platform.instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=busy.job_name, message="done"), busy.run_id
    )
    again = tick(platform, waiting.cursor)
    [later] = again.run_requests  # the files that waited, in one run once the one in flight ended
    assert replica_key(NAME) in later.asset_selection
    assert execute(platform, later).success
    assert checks_shown(platform) == passed
    assert platform.rows(NAME)[ID]["Name"] == "Acme Corp"
