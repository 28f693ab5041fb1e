"""What the UI shows of a replica while events keep landing, and when the next landing run is requested.

The asset graph reads a replica's state from the instance: "Materializing…" while any run selecting it is queued or
in flight, and its checks as the latest execution of each (Dagster records a run's planned check evaluations when
the run is created, so a queued run turns them all "in progress"). The landing sensor requests the next landing run
as soon as the one in flight has ingested its files, so under a steady landing rate one run waits in the queue and
the replica shows its checks in progress: the truth, a newer change is on its way (sensors/landing_zone.py). Runs
here are created as the daemon creates them (`create_run_for_job`, which records the plan) and executed with
Dagster's real `materialize()`; the run in flight ingests through the ingest step's own function under its run id;
the statuses are read from the event log the UI reads.
"""

from __future__ import annotations

import json
import time

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.test_utils import create_run_for_test
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import CHECKS
from cdc_assets.names import CHANGE_EVENTS_KEY, TAG_REASON, replica_key
from object_schema.describe import ObjectSchema
from replication.ingest import IngestRun, ingest
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from salesforce_emulator.landing_lines import event
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


def ingested_by(platform: Platform, spark, sample_dir, run: dg.DagsterRun) -> None:
    """`run`'s ingest step commits what is pending to change_events under its run id (the step's own function; its
    materialization is reported separately: `ingest_step_ended`)."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / f"{NAME}.json").read_text()))
    warehouse, zone = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    ingest(IngestRun(spark, warehouse, zone, {NAME: schema}, run_id=run.run_id))


def ingest_step_ended(platform: Platform, run: dg.DagsterRun) -> None:
    """What the ingest step records once every batch is committed: change_events' materialization, in `run`."""
    materialized = StepMaterializationData(dg.AssetMaterialization(CHANGE_EVENTS_KEY))
    event = DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value, job_name=run.job_name, event_specific_data=materialized
    )
    platform.instance.report_dagster_event(event, run.run_id)


def test_the_next_landing_run_is_requested_once_the_one_in_flight_has_ingested(platform, spark, sample_dir):
    now = int(time.time() * 1000)  # a fresh change: the freshness check passes
    platform.land([event(NAME, "CREATE", [ID], now, Name="Acme")])
    first = tick(platform, None)
    [request] = first.run_requests
    assert execute(platform, request).success
    passed = dict.fromkeys(CHECKS, AssetCheckExecutionRecordStatus.SUCCEEDED.value)
    assert checks_shown(platform) == passed

    # A landing run is running (created by an earlier tick for this file), its ingest not done yet.
    platform.land([event(NAME, "UPDATE", [ID], now + 1000, Name="Acme Corp")])
    busy = create_run_for_test(
        platform.instance,
        status=dg.DagsterRunStatus.STARTED,
        tags={TAG_REASON: REASON_FILES},
        asset_selection=frozenset(request.asset_selection),
    )
    waiting = tick(platform, first.cursor)
    assert not waiting.run_requests, "the run in flight ingests this file itself"
    assert f"wait for landing run {busy.run_id[:8]} (STARTED)" in waiting.skip_reason.skip_message

    # It has committed to change_events, but its step has not ended: it may have batches left, so new files wait.
    ingested_by(platform, spark, sample_dir, busy)
    platform.land([event(NAME, "UPDATE", [ID], now + 2000, Name="Acme Inc")])
    batches_left = tick(platform, waiting.cursor)
    assert not batches_left.run_requests
    assert busy.run_id[:8] in batches_left.skip_reason.skip_message

    # Its ingest step ended: the new file is no run's, and the next run is requested while busy still applies.
    ingest_step_ended(platform, busy)
    requested = tick(platform, batches_left.cursor)
    [later] = requested.run_requests
    assert replica_key(NAME) in later.asset_selection
    queued = submit(platform, later)
    in_progress = dict.fromkeys(CHECKS, "in progress")
    assert checks_shown(platform) == in_progress, "the queued run's planned checks: a newer change is on its way"

    # One waits at most: a file landing now waits for the queued run to ingest.
    platform.land([event(NAME, "UPDATE", [ID], now + 3000, Name="Acme Ltd")])
    behind = tick(platform, requested.cursor)
    assert not behind.run_requests
    assert f"wait for landing run {queued.run_id[:8]}" in behind.skip_reason.skip_message
    assert tick(platform, behind.cursor).run_requests == [], "a re-evaluated tick requests nothing more"

    platform.instance.report_dagster_event(
        DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=busy.job_name, message="done"), busy.run_id
    )
    assert execute(platform, later).success  # the queued run, once busy ended: every file pending at its start
    assert checks_shown(platform) == passed
    assert platform.rows(NAME)[ID]["Name"] == "Acme Ltd"
