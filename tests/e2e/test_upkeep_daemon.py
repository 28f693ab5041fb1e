"""Upkeep and the UI's actions under the real Dagster daemon, beside running replication.

While a workload lands events and the sensors run replication, the upkeep jobs of every table are launched again
and again through Dagster's GraphQL API (what the UI's Launch button sends), Contact is paused and resumed, and
the UI's reconcile and acknowledge jobs run. Upkeep waits for each table's pool (change_events) or host lock (the
replicas), so none runs beside a writer of its table. Once everything settles every replica equals the org field by field, its changefeed replays
to its live rows (compaction emitted no feed records), and the upkeep runs all succeeded and shrank file counts.
"""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient
from deltalake import DeltaTable
from org_compare import differences, live_rows

from cdc_assets.names import TAG_UPKEEP
from cdc_assets.operate.pause import paused_objects
from cdc_assets.upkeep.jobs import CE_JOB, REPLICAS_JOB
from demo.instance import STORAGES
from replication.changefeed.reader import replay
from resources.delta import CHANGE_EVENTS

# On SQLite and on PostgreSQL (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("storage", STORAGES, indirect=True, scope="session")]

CHANGES, RATE = 3_000, 60


def client(stack) -> DagsterGraphQLClient:
    host, port = stack.ui_url.removeprefix("http://").split(":")
    return DagsterGraphQLClient(host, port_number=int(port))


def launch(stack, job: str, config: dict | None = None) -> str:
    return client(stack).submit_job_execution(job, run_config=config or {})


def wait_runs(stack, run_ids: list[str], timeout: float = 600) -> dict[str, dg.DagsterRunStatus]:
    done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        statuses = {r: client(stack).get_run_status(r) for r in run_ids}
        if set(statuses.values()) <= done:
            return statuses
        time.sleep(3)
    pytest.fail(f"runs did not finish within {timeout:.0f} s: {statuses}")


def test_upkeep_and_ui_actions_beside_running_replication_keep_replicas_equal_to_the_org(stack):
    stack.workload.run(changes=100)
    stack.wait_settled(timeout_seconds=600)

    workload = threading.Thread(target=stack.workload.run, kwargs={"changes": CHANGES, "rate": RATE})
    workload.start()
    upkeep_runs = []
    launch(stack, "pause_replication", {"ops": {"pause_replication_op": {"config": {"objects": ["Contact"]}}}})
    while workload.is_alive():
        upkeep_runs += [launch(stack, job) for job in (REPLICAS_JOB, CE_JOB)]
        time.sleep(15)
    workload.join()
    with stack.instance() as instance:
        assert paused_objects(instance, ["Contact"]) == {"Contact"}
    resumed = launch(
        stack, "resume_replication", {"ops": {"resume_replication_op": {"config": {"objects": ["Contact"]}}}}
    )
    reconciled = launch(  # asked: the reconciliation sensor starts the run
        stack, "reconcile_objects", {"ops": {"reconcile_objects_op": {"config": {"objects": ["Account"]}}}}
    )
    acknowledged = launch(stack, "acknowledge_quarantine")
    upkeep_runs += [launch(stack, job) for job in (REPLICAS_JOB, CE_JOB)]
    statuses = wait_runs(stack, [*upkeep_runs, resumed, reconciled, acknowledged])
    assert set(statuses.values()) == {dg.DagsterRunStatus.SUCCESS}, statuses
    stack.wait_settled(timeout_seconds=600)

    for name in stack.objects:
        assert differences(stack.emu, name, stack.rows(name), limit=20) == [], name
        records = [record for _, record in stack.feed(name).read()]
        assert replay(records) == live_rows(DeltaTable(str(stack.warehouse / name))), name

    with stack.instance() as instance:
        key = dg.AssetKey("change_events")
        observed = [
            {k: v.value for k, v in r.asset_observation.metadata.items()}
            for r in instance.fetch_observations(key, limit=1000).records
        ]
        runs = instance.get_runs(filters=dg.RunsFilter(tags={TAG_UPKEEP: CHANGE_EVENTS}))
    assert len(runs) >= 2 and observed
    assert all(o["files_after"] <= o["files_before"] for o in observed)
    print(
        f"\n{len(upkeep_runs)} upkeep runs beside replication; change_events files before/after: "
        + ", ".join(f"{o['files_before']}->{o['files_after']}" for o in observed[:8])
    )
