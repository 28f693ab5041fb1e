"""What a person does from the Dagster UI, through Dagster's Python API on a real instance: the jobs the UI launches
(`execute_in_process`, as the launchpad's run would), and the sensors that honour a pause
(`build_sensor_context`). Tables, Spark and Dagster are real."""

from __future__ import annotations

import time

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.test_utils import create_run_for_test
from deltalake import DeltaTable, QueryBuilder, TableFeatures
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import check_quarantine_empty
from cdc_assets.names import CHANGE_EVENTS_KEY, TAG_REASON, ingest_keys, object_tag, replica_key, work_tag
from cdc_assets.operate.jobs import ACK_JOB, PAUSE_JOB, RESUME_JOB
from cdc_assets.operate.pause import paused_objects
from cdc_assets.upkeep.jobs import CE_JOB, REPLICAS_JOB
from replication.config import load_config
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.landing_zone import REASON_RESUME
from sensors.landing_zone import SENSOR_NAME as LANDING
from sensors.reconciliation import SENSOR_NAME as RECONCILE
from sensors.replica_status import last_error, status_of
from sensors.work import plan

T0 = 1_763_800_000_000
ACC, CON = "001000000000001AAA", "003000000000001AAA"


def names(path) -> dict[str, str]:
    if not (path / "_delta_log").exists():
        return {}
    rows = pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute("select * from t").read_all())
    return {r["Id"]: r.get("Name") or r.get("LastName") for r in rows.to_pylist()}


def ce_entities(platform: Platform) -> list[str]:
    rows = (
        QueryBuilder()
        .register("t", DeltaTable(str(platform.warehouse / CHANGE_EVENTS)))
        .execute("select entity from t")
        .read_all()
    )
    return sorted(pa.table(rows)["entity"].to_pylist())


def evaluate(platform: Platform, name: str, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=platform.instance, cursor=cursor, definitions=platform.defs, resources=platform.defs.resources
    )
    return platform.defs.get_sensor_def(name)(context)


def launch(platform: Platform, job: str, config: dict | None = None, raise_on_error: bool = True):
    """The run the launchpad starts for `job` with `config` (the job's own preset when None)."""
    kwargs = {"run_config": config} if config is not None else {}
    job_def = platform.defs.resolve_job_def(job)
    return job_def.execute_in_process(instance=platform.instance, raise_on_error=raise_on_error, **kwargs)


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        Workload(emu, seed=11).build_org(accounts=2)
        yield emu


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", ["Account", "Contact"], TEST_SPARK_CONF, close_after=0)


def test_a_paused_object_is_left_out_its_events_land_and_resume_applies_them(platform):
    launch(platform, PAUSE_JOB, {"ops": {"pause_replication_op": {"config": {"objects": ["Account"]}}}})
    assert paused_objects(platform.instance, ["Account", "Contact"]) == {"Account"}
    platform.land(
        [
            event("Account", "CREATE", [ACC], T0, tx="a", Name="Acme"),
            event("Contact", "CREATE", [CON], T0 + 1, tx="c", LastName="Lovelace"),
        ]
    )
    tick = evaluate(platform, LANDING)
    [request] = tick.run_requests
    assert set(request.asset_selection) == {*ingest_keys(["Contact"]), replica_key("Contact")}
    assert platform.execute(request).success
    assert ce_entities(platform) == ["Account", "Contact"]  # events keep landing
    assert names(platform.warehouse / "Contact") == {CON: "Lovelace"}
    assert names(platform.warehouse / "Account") == {}  # the paused replica waits
    idle = evaluate(platform, LANDING, tick.cursor)
    assert all(replica_key("Account") not in r.asset_selection for r in idle.run_requests)
    for r in idle.run_requests:
        platform.execute(r)
    assert names(platform.warehouse / "Account") == {}

    launch(platform, RESUME_JOB, {"ops": {"resume_replication_op": {"config": {"objects": ["Account"]}}}})
    catch_up = evaluate(platform, LANDING, idle.cursor)
    [request] = catch_up.run_requests
    assert request.tags[TAG_REASON] == REASON_RESUME and request.asset_selection == [replica_key("Account")]
    assert platform.execute(request).success
    assert names(platform.warehouse / "Account") == {ACC: "Acme"}  # nothing lost while paused
    assert not any(
        r.tags.get(TAG_REASON) == REASON_RESUME for r in evaluate(platform, LANDING, catch_up.cursor).run_requests
    )  # asked once


def test_pausing_an_unknown_object_fails_and_says_which_objects_exist(platform):
    result = launch(
        platform,
        PAUSE_JOB,
        {"ops": {"pause_replication_op": {"config": {"objects": ["Acount"]}}}},
        raise_on_error=False,
    )
    assert not result.success
    message = result.all_events[-1].message if result.all_events else ""
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert (
        "Acount" in failure.step_failure_data.error.message
        and "Account, Contact" in failure.step_failure_data.error.message
    ), message


def test_the_reconciliation_sensor_asks_nothing_of_a_paused_object(platform):
    platform.land([event("Account", "GAP_UPDATE", [ACC], T0, tx="g")])
    platform.run()
    assert platform.materialization_of("Account")["dirty_records"] == 1
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    replication = load_config(platform.config)
    assert [p.work.kind for p in plan(platform.instance, warehouse, replication)] == ["reconcile"]  # work is due
    launch(platform, PAUSE_JOB, {"ops": {"pause_replication_op": {"config": {"objects": ["Account"]}}}})
    paused = evaluate(platform, RECONCILE)  # (unpaused, it would ask the org's API budget first)
    assert not paused.run_requests and "nothing to do" in paused.skip_reason.skip_message


def test_an_ask_from_the_ui_is_run_by_the_reconciliation_sensor_once_tagged_as_its_work_and_waits_for_a_resume(
    tmp_path, org, spark
):
    salesforce = SalesforceResource(instance_url=org.instance_url, access_token=org.token, ca_bundle=str(org.ca_file))
    platform = Platform(tmp_path / "p", None, ["Account", "Contact"], TEST_SPARK_CONF, salesforce=salesforce)
    platform.run()  # the initial loads
    assert evaluate(platform, RECONCILE).skip_reason  # nothing to do
    assert launch(platform, "reconcile_objects", objects_config("reconcile_objects", ["Account"])).success
    ticked = evaluate(platform, RECONCILE)
    [request] = ticked.run_requests
    assert request.tags[work_tag("Account")] == "reconcile" and request.tags[object_tag("Account")] == "1"
    assert request.run_key.startswith("asked-") and request.asset_selection == [replica_key("Account")]
    assert platform.execute(request).success
    assert platform.materialization_of("Account")["mode"] == "reconcile"
    assert not evaluate(platform, RECONCILE, ticked.cursor).run_requests  # asked once, run once

    launch(platform, PAUSE_JOB, {"ops": {"pause_replication_op": {"config": {"objects": ["Contact"]}}}})
    assert launch(platform, "resync_objects", objects_config("resync_objects", ["Contact"])).success
    waiting = evaluate(platform, RECONCILE, ticked.cursor)
    assert not waiting.run_requests  # a paused object's ask waits for the resume
    launch(platform, RESUME_JOB, {"ops": {"resume_replication_op": {"config": {"objects": ["Contact"]}}}})
    [resync] = evaluate(platform, RECONCILE, ticked.cursor).run_requests
    assert resync.tags[work_tag("Contact")] == "resync" and resync.run_config == {
        "ops": {replica_key("Contact").to_python_identifier(): {"config": {"mode": "resync"}}}
    }


def objects_config(job: str, objects: list[str]) -> dict:
    return {"ops": {f"{job}_op": {"config": {"objects": objects}}}}


def test_acknowledge_quarantine_job_makes_the_check_pass(platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    platform.land(["not json", event("Account", "CREATE", [ACC], T0, tx="a", Name="Acme")])
    platform.run()
    assert not check_quarantine_empty(warehouse).passed
    assert launch(platform, ACK_JOB).success  # config `until` empty: everything quarantined so far
    assert check_quarantine_empty(warehouse).passed
    platform.land(["still not json"])
    platform.run()
    assert not check_quarantine_empty(warehouse).passed  # a newer line is not acknowledged


def test_status_reports_lag_dirty_last_error_api_calls_and_pause(platform):
    platform.land(
        [
            event("Account", "CREATE", ["001000000000002AAA"], T0, tx="a", Name="Acme"),
            event("Account", "GAP_UPDATE", [ACC], T0 + 1, tx="g"),
        ]
    )
    platform.run()
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    status = status_of(platform.instance, warehouse, "Account", paused=False, usage={"used": 7, "limit": 1000})
    assert status["dirty_records"].value == 1
    assert status["lag_seconds"].value > 3600  # events of 2025
    assert status["last_error"].value == "" and status["api_used_today"].value == 7
    time.sleep(1.1)  # run records keep whole seconds: the failure must come after the materialization
    failed = create_run_for_test(
        platform.instance, status=dg.DagsterRunStatus.FAILURE, tags={object_tag("Account"): "1"}
    )
    assert last_error(platform.instance, "Account").startswith(failed.run_id[:8])
    assert last_error(platform.instance, "Contact") == ""


def test_upkeep_jobs_change_events_in_its_pool_replicas_one_walk_and_observations_plot_files_and_bytes(platform):
    for n in range(3):
        platform.land([event("Account", "CREATE", [f"00100000000000{n}AAA"], T0 + n, tx=f"a{n}", Name="A")])
        platform.run()
    [node] = platform.defs.resolve_job_def(CE_JOB).graph.node_defs
    assert node.pool == "change_events"
    assert launch(platform, CE_JOB).success
    [record] = platform.instance.fetch_observations(CHANGE_EVENTS_KEY, limit=1).records
    meta = {k: v.value for k, v in record.asset_observation.metadata.items()}
    assert meta["files_before"] >= 3 and meta["files_after"] == 1 and meta["bytes_after"] > 0
    assert "rows_trimmed" in meta
    assert launch(platform, REPLICAS_JOB).success  # Contact has no table yet: nothing to keep up, no failure
    [record] = platform.instance.fetch_observations(replica_key("Account"), limit=1).records
    assert {k: v.value for k, v in record.asset_observation.metadata.items()}["files_after"] == 1
    assert {s.name for s in platform.defs.schedules} >= {f"{CE_JOB}_schedule", f"{REPLICAS_JOB}_schedule"}
    assert not any(j.name.startswith("upkeep_Account") for j in platform.defs.resolve_all_job_defs())


def test_a_replica_whose_upkeep_fails_is_named_and_the_walk_keeps_the_others_up(platform):
    for n in range(2):
        platform.land(
            [
                event("Account", "CREATE", [f"00100000000000{n}AAA"], T0 + n, tx=f"a{n}", Name="A"),
                event("Contact", "CREATE", [f"00300000000000{n}AAA"], T0 + n, tx=f"a{n}", LastName="C"),
            ]
        )
        platform.run()
    # Someone else turned on a feature the platform does not write: its upkeep refuses the table.
    DeltaTable(str(platform.warehouse / "Account")).alter.add_feature(
        TableFeatures.RowTracking, allow_protocol_versions_increase=True
    )
    result = launch(platform, REPLICAS_JOB, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "Account" in failure and "Contact" not in failure, failure
    [record] = platform.instance.fetch_observations(replica_key("Contact"), limit=1).records
    assert {k: v.value for k, v in record.asset_observation.metadata.items()}["files_before"] >= 2
    unknown = launch(
        platform, REPLICAS_JOB, {"ops": {f"{REPLICAS_JOB}_op": {"config": {"objects": ["Acount"]}}}}, False
    )
    assert not unknown.success
