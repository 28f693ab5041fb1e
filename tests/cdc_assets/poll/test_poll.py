"""Polling replication (`mode: poll`) against the real HTTPS emulator, with CDC disabled in the org.

After workloads with bursts of equal SystemModstamps (large transactions, transactions sharing a timestamp),
late-committed rows, deletes, undeletes and purges, every polled replica equals the org; a run SIGKILLed in the
middle of a Bulk job resumes from the locator; an object switches from poll to cdc and back without a reload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest
import yaml
from org_compare import differences
from poll_harness import (
    OPTIONS,
    POLLED,
    assert_equal_to_org,
    poll_platform,
    poll_state,
    run_replicas,
    set_modes,
    update,
)
from settings import REPO

import resources.spark as spark_module
from cdc_assets.names import replica_key
from salesforce_emulator.workload import Workload
from sensors.poll import SENSOR_NAME
from shared.faults import POLL_POINTS


def test_polled_replicas_equal_the_org_after_bursts_late_commits_deletes_and_purges(tmp_path, org):
    workload = Workload(org, seed=21, large_transaction=(60, 90))
    workload.build_org(accounts=30)
    platform = poll_platform(tmp_path, org)
    first = run_replicas(platform)
    assert platform.materialization(first, "Account")["mode"] == "initial_load"
    assert_equal_to_org(platform, org)

    time.sleep(1.1)  # the late commit below goes 1 s back: behind it, records the workload leaves untouched
    workload.run(changes=150)  # updates, creates, deletes, undeletes, purges
    workload.large("Contact")  # 60-90 records, one SystemModstamp: more than a REST probe (50) and a Bulk page (40)
    org.same_timestamp_commits(8)  # eight transactions sharing the newest SystemModstamp
    workload.run(changes=8)
    for name in POLLED:  # one record deleted and purged, one deleted and undeleted, between two polls
        gone, back = org.store.ids(name)[:2]  # both loaded by the first run
        with org.store.transaction() as txn:
            txn.delete(name, [gone, back])
        with org.store.transaction() as txn:
            txn.purge(name, [gone])
            txn.undelete(name, [back])
    result = run_replicas(platform)
    meta = {o: platform.materialization(result, o) for o in POLLED}
    assert any(m["poll_bulk"] and m["poll_pages"] > 1 for m in meta.values()), meta
    purged = {o: [i for i in platform.rows(o) if i not in set(org.store.ids(o, include_deleted=True))] for o in POLLED}
    assert {o: m["hard_deleted"] for o, m in meta.items()} == {o: len(ids) for o, ids in purged.items()}, (meta, purged)
    assert all(purged.values())
    assert_equal_to_org(platform, org)

    again = run_replicas(platform)  # the inclusive re-query re-reads the boundary: nothing written twice
    assert all(platform.materialization(again, o)["poll_rows_read"] > 0 for o in POLLED)
    assert all(platform.materialization(again, o)["poll_rows_written"] == 0 for o in POLLED)

    # Another transaction at the cursor's own SystemModstamp (the org's newest: the Contact undelete above), changing
    # the cursor's record: the same position, other values.
    cursor = platform.materialization(again, "Contact")["poll_cursor"]
    assert cursor["ts"] == max(platform.materialization(again, o)["poll_cursor"]["ts"] for o in POLLED)
    org.same_timestamp_commits(1)
    update(org, "Contact", cursor["id"], Title="Same millisecond, other transaction")
    # A transaction stamped a second before rows already polled (committed late): within the 2 s overlap.
    account = min((r for r in org.store.snapshot("Account") if not r["IsDeleted"]), key=lambda r: r["SystemModstamp"])
    org.late_commits(1, 1000)
    update(org, "Account", account["Id"], Name="Committed late")
    later = run_replicas(platform)
    assert {o: platform.materialization(later, o)["poll_rows_written"] for o in POLLED} == {"Account": 1, "Contact": 1}
    assert_equal_to_org(platform, org)

    checked = platform.run(checks=True)  # the replica checks of a CDC object, unchanged, on polled replicas
    for name in POLLED:
        results = platform.check_results(checked, name)
        assert results and all(r.passed for r in results.values()), {k: r.description for k, r in results.items()}


def test_a_late_commit_older_than_the_overlap_is_what_the_overlap_is_for(tmp_path, org):
    Workload(org, seed=4).build_org(accounts=10)
    platform = poll_platform(tmp_path, org, objects=["Account"], poll_overlap=0)
    run_replicas(platform, ["Account"])
    # A late commit never predates the SystemModstamp of a record it changes (Salesforce never moves one back).
    time.sleep(1.1)
    update(org, "Account", org.store.ids("Account")[0], Name="moves the cursor")
    run_replicas(platform, ["Account"])
    org.late_commits(1, 1000)
    update(org, "Account", org.store.ids("Account")[1], Name="committed late")
    run_replicas(platform, ["Account"])
    assert differences(org, "Account", platform.rows("Account")) != []  # no overlap: missed
    set_overlap = yaml.safe_load(platform.config.read_text())
    set_overlap["options"]["poll_overlap"] = 5
    platform.config.write_text(yaml.safe_dump(set_overlap))
    set_modes(platform, {})
    caught = run_replicas(platform, ["Account"])
    assert platform.materialization(caught, "Account")["poll_rows_written"] == 1, platform.materialization(
        caught, "Account"
    )
    assert differences(org, "Account", platform.rows("Account")) == []


def kill_poll_run(platform, org, spark, objects: list[str], point: str, options: dict, *, skip: int = 0) -> None:
    """One poll run of `objects` (one Dagster run, as the poll sensor asks) in a subprocess, SIGKILLed at `point`
    once it has passed it `skip` times (CDC_FAULT_SKIP); it computes on this process's Spark JVM."""
    gateway = spark.sparkContext._gateway.gateway_parameters
    env = {
        **os.environ,
        "CDC_FAULT_POINT": point,
        "CDC_FAULT_ACTION": "kill",
        "CDC_FAULT_SKIP": str(skip),
        "PYSPARK_GATEWAY_PORT": str(gateway.port),
        "PYSPARK_GATEWAY_SECRET": gateway.auth_token,
        "SF_INSTANCE_URL": org.instance_url,
        "SF_ACCESS_TOKEN": org.token,
        "SF_CA_BUNDLE": str(org.ca_file),
        "CRASH_RUNNER_OPTIONS": json.dumps(options),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "crash_runner.py"), str(platform.root), "-", ",".join(objects), "poll"],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


@pytest.mark.parametrize("point", POLL_POINTS)
def test_sigkill_during_a_poll_then_rerun_equals_the_org(point, tmp_path, org, spark):
    """Killed between Bulk pages, the re-run reads the same job on from its locator (no new query)."""
    Workload(org, seed=8).build_org(accounts=40)
    bulk = point == "poll.after_page_commit"
    options = OPTIONS | ({} if bulk else {"poll_rest_max_records": 1000})  # Bulk pages of 40, or one REST query
    platform = poll_platform(tmp_path, org, objects=["Contact"], **options)
    run_replicas(platform, ["Contact"])
    changed = 100 if bulk else 10
    for record_id in org.store.ids("Contact")[:changed]:
        update(org, "Contact", record_id, Title=f"T-{record_id[-4:]}")
    purged = org.store.ids("Contact")[-1]
    with org.store.transaction() as txn:
        txn.delete("Contact", [purged])
    with org.store.transaction() as txn:
        txn.purge("Contact", [purged])

    kill_poll_run(platform, org, spark, ["Contact"], point, options)
    state = poll_state(platform, "Contact")
    if bulk:
        assert state.job.locator and state.job.records == 40, state

    org.reset_request_counts()
    set_modes(platform, {"Contact": "poll"})
    result = run_replicas(platform, ["Contact"])
    meta = platform.materialization(result, "Contact")
    if bulk:
        assert meta["poll_resumed"] == 1
        # One job: the Id comparison's. The poll read the killed run's job on from its locator.
        assert org.request_counts().get("bulk_query_job", 0) == 1
    assert poll_state(platform, "Contact").job is None
    assert_equal_to_org(platform, org, ["Contact"])


# One field each object of the run has, changed in the org between the runs.
CHANGED_FIELD = {"Account": "Name", "Contact": "Title", "Opportunity": "Name"}


@pytest.mark.parametrize("point", ["poll.after_rest_commit", "poll.after_page_commit"])
def test_a_poll_run_of_several_objects_killed_in_its_second_object_resumes_each_from_its_own_cursor(
    point, tmp_path, org, spark
):
    """One run polls three objects, as a poll cycle's run does; it is killed in the second: after that object's REST
    commit (between objects), or between two Bulk pages of it. The first object committed its whole poll, the second
    part of it, the third nothing. The next run reads the first from its committed cursor (nothing again), the
    second on from its committed Bulk job, the third whole; every replica then equals the org."""
    objects = ["Account", "Contact", "Opportunity"]
    Workload(org, seed=9, person_accounts=False).build_org(accounts=120)  # 100 records of each object at least
    bulk = point == "poll.after_page_commit"
    # Bulk pages of 40, or one REST query. No overlap, and a cursor at a change of its own: a page holding only rows
    # read again (the load's, sharing its newest SystemModstamp) writes nothing, so its Bulk position is not
    # committed, and the page the kill follows would not be the second object's first.
    options = OPTIONS | {"poll_overlap": 0} | ({} if bulk else {"poll_rest_max_records": 1000})
    platform = poll_platform(tmp_path, org, objects=objects, **options)
    run_replicas(platform, objects)
    for name in objects:
        update(org, name, org.store.ids(name)[-1], **{CHANGED_FIELD[name]: "cursor"})
    run_replicas(platform, objects)
    changed = 100 if bulk else 10
    for name in objects:
        for record_id in org.store.ids(name)[:changed]:
            update(org, name, record_id, **{CHANGED_FIELD[name]: f"changed {record_id[-4:]}"})

    # Bulk: the first object's two page commits pass (its third page ends its job), the second's first one kills.
    kill_poll_run(platform, org, spark, objects, point, options, skip=2 if bulk else 1)
    second = poll_state(platform, objects[1])
    assert differences(org, objects[0], platform.rows(objects[0])) == []  # whole before the kill
    if bulk:
        assert second.job and second.job.locator and second.job.records == 40, second
    assert differences(org, objects[2], platform.rows(objects[2])) != []  # not reached

    result = run_replicas(platform, objects)
    meta = {name: platform.materialization(result, name) for name in objects}
    assert meta[objects[0]]["poll_rows_written"] == 0, meta[objects[0]]  # from its own cursor: nothing again
    if bulk:
        assert meta[objects[1]]["poll_resumed"] == 1, meta[objects[1]]
    assert meta[objects[2]]["poll_rows_written"] >= changed, meta[objects[2]]
    assert all(poll_state(platform, name).job is None for name in objects)
    assert_equal_to_org(platform, org, objects)


def test_an_object_switches_from_poll_to_cdc_and_back_without_a_reload(tmp_path, org):
    # No person accounts: a CDC event renaming one makes its record dirty until a reconcile fetches its Name
    # (tests/cdc_assets/test_person_account_names.py); the subject here is the hand-off between modes.
    workload = Workload(org, seed=13, person_accounts=False)
    workload.build_org(accounts=20)
    platform = poll_platform(tmp_path, org, objects=["Account"])
    run_replicas(platform, ["Account"])
    workload.run(changes=60)
    run_replicas(platform, ["Account"])
    assert_equal_to_org(platform, org, ["Account"])

    # poll -> cdc: CDC is enabled in the org first, changes go on, then replication.yaml says cdc.
    org.set_cdc_objects(["Account"])
    workload.run(changes=60)
    set_modes(platform, {"Account": "cdc"})
    org.flush_cdc()
    handoff = platform.run(close_after=0)
    meta = platform.materialization(handoff, "Account")
    assert meta["mode"] == "poll_handoff"
    # The events of the changes the hand-off poll already wrote are at or before the polled rows: superseded.
    assert meta["superseded"] > 0 and meta["poll_rows_written"] > 0
    assert_equal_to_org(platform, org, ["Account"])
    workload.run(changes=60)
    org.flush_cdc()
    cdc = platform.run(close_after=0)
    assert platform.materialization(cdc, "Account")["mode"] == "apply"
    assert platform.materialization(cdc, "Account")["applied"] > 0
    assert_equal_to_org(platform, org, ["Account"])

    # cdc -> poll: CDC off again in the org; polling starts behind the replica's newest change.
    org.set_cdc_objects([])
    workload.run(changes=60)
    set_modes(platform, {"Account": "poll"})
    back = run_replicas(platform, ["Account"])
    assert platform.materialization(back, "Account")["mode"] == "poll"
    assert platform.materialization(back, "Account")["poll_rows_written"] > 0
    assert_equal_to_org(platform, org, ["Account"])


def test_the_poll_sensor_asks_the_org_once_for_every_25_objects_and_polls_only_those_with_changes(tmp_path, org):
    Workload(org, seed=5).build_org(accounts=4)
    platform = poll_platform(tmp_path, org, hard_delete_check_every=3600)
    assert run_replicas(platform).success  # the initial load
    assert run_replicas(platform).success  # the first poll, and its Id comparison
    time.sleep(OPTIONS["poll_overlap"] + 0.5)  # the org's changes older than the overlap
    with org.store.transaction() as txn:
        txn.update("Account", org.store.ids("Account")[0], {"Phone": "555 0199"})
    assert run_replicas(platform).success  # read right after the change
    # Account's poll read less than poll_overlap after its cursor (a late record may still appear behind it): polled
    # without asking; Contact has nothing newer than its cursor: not polled.
    [request] = platform.sensor_requests(SENSOR_NAME)
    assert request.tags["cdc/objects"] == "Account"
    time.sleep(OPTIONS["poll_overlap"] + 0.5)
    assert platform.execute(request).success

    org.reset_request_counts()
    assert platform.sensor_requests(SENSOR_NAME) == []  # nothing changed: no run
    # One Composite call asked about both objects (and one `limits` call, the API budget's).
    assert org.request_counts() == {"composite": 1, "limits": 1}
    with org.store.transaction() as txn:
        txn.update("Contact", org.store.ids("Contact")[0], {"Title": "Changed"})
    [request] = platform.sensor_requests(SENSOR_NAME)
    assert request.tags["cdc/objects"] == "Contact"
    assert platform.execute(request).success
    assert_equal_to_org(platform, org)


def test_one_object_failing_in_a_poll_cycle_leaves_the_others_committed_and_is_polled_again(tmp_path, org):
    Workload(org, seed=5).build_org(accounts=4)
    platform = poll_platform(tmp_path, org)
    assert run_replicas(platform).success  # the initial load
    account, contact = org.store.ids("Account")[0], org.store.ids("Contact")[0]
    with org.store.transaction() as txn:
        txn.update("Account", account, {"Phone": "555 0142"})
        txn.update("Contact", contact, {"Title": "Changed"})
    org.fail_next_requests(1, status=400)  # the cycle's first step (Account) meets an error the org returns
    result = run_replicas(platform, raise_on_error=False)
    assert not result.success
    failed = {e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE}
    assert failed == {replica_key("Account").to_python_identifier()}
    assert platform.rows("Contact")[contact]["Title"] == "Changed"  # its step ran and committed all the same
    assert platform.rows("Account")[account]["Phone"] != "555 0142"

    assert run_replicas(platform, ["Account"]).success  # its next window: from its own committed cursor
    assert_equal_to_org(platform, org)


def test_a_polled_object_whose_runs_fail_backs_off_on_its_own_while_the_others_are_polled(tmp_path, org):
    Workload(org, seed=5).build_org(accounts=4)
    platform = poll_platform(tmp_path, org, poll_interval=2, retry_backoff_max_seconds=5)
    assert run_replicas(platform).success  # the initial load
    account, contact = org.store.ids("Account")[0], org.store.ids("Contact")[0]
    for attempt in (1, 2):  # the cycle's runs fail Account twice in a row (an error the org returns to its step)
        time.sleep(2.1)  # after one failure it waits one interval
        [request] = platform.sensor_requests(SENSOR_NAME)
        assert "Account" in request.tags["cdc/objects"].split(","), (attempt, request.tags)
        org.fail_next_requests(1, status=400)
        assert not platform.execute(request).success
    failed_at = time.monotonic()
    with org.store.transaction() as txn:
        txn.update("Contact", contact, {"Title": "Changed"})
        txn.update("Account", account, {"Phone": "555 0142"})

    # Two failures in a row: Account waits 2 x 2 = 4 s (under the 5 s cap) from the second one's end; Contact is
    # polled meanwhile, in a run without it.
    [request] = platform.sensor_requests(SENSOR_NAME)
    assert request.tags["cdc/objects"] == "Contact"
    assert platform.execute(request).success
    assert platform.rows("Contact")[contact]["Title"] == "Changed"

    time.sleep(max(0.0, failed_at + 4.5 - time.monotonic()))
    [request] = platform.sensor_requests(SENSOR_NAME)
    assert "Account" in request.tags["cdc/objects"].split(","), request.tags
    assert platform.execute(request).success
    assert_equal_to_org(platform, org)


def test_a_poll_run_starts_no_spark_session(tmp_path, org, monkeypatch):
    """Polls write through delta-rs: the run's Spark resource makes its session only when a step asks for it, so a
    poll step never starts a JVM (a local one costs seconds of CPU and half a gigabyte, every cycle). (The `schema`
    check of rows a poll wrote still validates them with pandera on Spark.)"""
    made: list[dict] = []
    real = spark_module.spark_session_from_config
    monkeypatch.setattr(spark_module, "spark_session_from_config", lambda conf: made.append(conf) or real(conf))
    Workload(org, seed=5).build_org(accounts=4)
    platform = poll_platform(tmp_path, org)
    assert run_replicas(platform).success  # the initial load
    made.clear()
    with org.store.transaction() as txn:
        txn.update("Contact", org.store.ids("Contact")[0], {"Title": "Changed"})
    assert run_replicas(platform).success
    assert made == []
    assert_equal_to_org(platform, org)
