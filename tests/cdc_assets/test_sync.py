"""Initial load, gap reconciliation and overflow resync against the real HTTPS emulator
(docs/design/contract.md §6-7)."""

from __future__ import annotations

import json
import math
import time

import dagster as dg
import pytest
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import TAG_MODE
from replication.schemas import stored_describe
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload

OBJECTS = ["Account", "Contact", "Opportunity"]


CANARY = "CANARY-7f3a9c-token"  # the org's access token: must never be written anywhere


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", token=CANARY) as emu:
        yield emu


def assert_no_canary(platform: Platform, caplog) -> None:
    """The token appears in no Dagster event (logs, metadata), no table file, no log record."""
    for run in platform.instance.get_runs():
        for entry in platform.instance.all_logs(run.run_id):
            assert CANARY not in repr(entry), f"token leaked into run {run.run_id} events"
    for path in platform.warehouse.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), f"token leaked into {path}"
    assert CANARY not in caplog.text


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


def make_platform(tmp_path, emu: Emulator, objects=OBJECTS) -> Platform:
    return Platform(tmp_path / "p", None, objects, TEST_SPARK_CONF, salesforce=resource(emu), initial_load=True)


def catch_up(platform: Platform, emu: Emulator) -> dg.ExecuteInProcessResult:
    emu.flush_cdc()
    return platform.run(close_after=0)


def sensor_requests(platform: Platform) -> list[dg.RunRequest]:
    """Evaluate the reconciliation sensor against the platform's instance."""
    return platform.sensor_requests()


def execute(platform: Platform, request: dg.RunRequest) -> bool:
    return platform.execute(request).success


def run_sensor_requests(platform: Platform) -> list[dg.RunRequest]:
    """Evaluate the reconciliation sensor, then execute what it requests."""
    return platform.run_sensor()


def assert_equal_to_org(platform: Platform, emu: Emulator, objects=OBJECTS) -> None:
    for name in objects:
        assert differences(emu, name, platform.rows(name)) == [], name


def test_initial_load_then_cdc_and_its_reconcile_equal_org(tmp_path, org):
    workload = Workload(org, seed=3)
    workload.build_org(accounts=20)
    platform = make_platform(tmp_path, org)
    first = platform.run()
    assert platform.materialization(first, "Account")["mode"] == "initial_load"
    workload.run(changes=150)
    catch_up(platform, org)
    # Person accounts created or renamed wait for the org's formatted Name: the one reconcile the workload needs.
    assert platform.materialization_of("Account")["names_to_fetch"] > 0
    assert [r.tags[TAG_MODE] for r in run_sensor_requests(platform)] == ["reconcile"]
    assert_equal_to_org(platform, org)


def test_gap_events_are_reconciled_by_the_sensor(tmp_path, org, caplog):
    workload = Workload(org, seed=5)
    workload.build_org(accounts=20)
    platform = make_platform(tmp_path, org)
    platform.run()
    org.set_faults(FaultConfig(gap_fraction=0.3, seed=1))
    workload.run(changes=150)
    catch_up(platform, org)
    dirty = {n: platform.materialization_of(n)["dirty_records"] for n in OBJECTS}
    assert sum(dirty.values()) > 0

    org.reset_request_counts()
    org.fail_next_requests(2, 503)  # transient org errors: retried with backoff, the run still completes
    requests = run_sensor_requests(platform)
    assert [r.tags[TAG_MODE] for r in requests] == ["reconcile"]  # one run for every object with dirty records
    assert {k.path[-1] for r in requests for k in r.asset_selection} == {n for n, d in dirty.items() if d}
    assert_equal_to_org(platform, org)
    calls = org.request_counts().get("composite_retrieve", 0)
    assert calls == sum(math.ceil(d / 2000) for d in dirty.values())
    assert run_sensor_requests(platform) == []  # nothing left to do
    assert_no_canary(platform, caplog)


def test_overflow_triggers_a_resync_that_equals_the_org(tmp_path, org):
    workload = Workload(org, seed=7, large_transaction=(60, 80))
    workload.build_org(accounts=30)
    platform = make_platform(tmp_path, org)
    platform.run()
    org.set_faults(FaultConfig(overflow_threshold=50, seed=2))
    workload.run(changes=100)
    workload.large("Contact")  # 60-80 changes in one transaction: over the threshold, Salesforce sends GAP_OVERFLOW
    workload.run(changes=100)
    catch_up(platform, org)
    pending = [n for n in OBJECTS if platform.materialization_of(n)["resync_pending"]]
    assert pending, "the workload's large transactions should have overflowed"
    requests = sensor_requests(platform)
    assert {m for r in requests for m in r.tags[TAG_MODE].split("+")} >= {"resync"}
    before = {n: platform.rows(n) for n in OBJECTS}
    org.fail_next_requests(50, 500)  # the org is down: the resync run fails cleanly, nothing half-written
    assert not any(execute(platform, r) for r in requests)
    assert {n: platform.rows(n) for n in OBJECTS} == before
    org.fail_next_requests(0)
    assert all(execute(platform, r) for r in requests)  # the next run completes
    assert_equal_to_org(platform, org)
    assert not any(platform.materialization_of(n)["resync_pending"] for n in OBJECTS)
    assert not [r for r in sensor_requests(platform) if "resync" in r.tags[TAG_MODE]]  # no resync loop
    assert_equal_to_org(platform, org)


def test_object_added_later_is_loaded_fully_then_follows_cdc(tmp_path, org):
    workload = Workload(org, seed=11)
    workload.build_org(accounts=15)
    platform = make_platform(tmp_path, org, objects=["Account"])
    platform.run()
    workload.run(changes=100)
    catch_up(platform, org)
    # Contact joins replication.yaml later: its first run is an initial load, then CDC with nothing missed.
    later = Platform(
        tmp_path / "p", None, ["Account", "Contact"], TEST_SPARK_CONF, salesforce=resource(org), initial_load=True
    )
    result = later.run(close_after=0)
    assert later.materialization(result, "Contact")["mode"] == "initial_load"
    workload.run(changes=100)
    catch_up(later, org)
    run_sensor_requests(later)  # person accounts' Names, fetched
    assert_equal_to_org(later, org, ["Account", "Contact"])


def test_a_field_added_in_the_org_is_found_by_refreshing_describe_and_backfilled(tmp_path, org):
    """Rating and Website are new in the org (null everywhere) and missing from the describe() the table was made
    with. An event sets them while describe() still lacks them (counted, named); once describe() has them (the
    org's, asked again), the columns are added, later events fill them, and the record whose earlier event carried
    them is reconciled: the replica equals the org."""
    workload = Workload(org, seed=13)
    workload.build_org(accounts=12)
    ids = org.store.ids("Account")
    with org.store.transaction() as txn:
        txn.update_many("Account", ids, {"Rating": None, "Website": None})
    full = org.store.describe("Account")
    old = full | {"fields": [f for f in full["fields"] if f["name"] not in ("Rating", "Website")]}
    describe_dir = tmp_path / "describe"
    describe_dir.mkdir()
    (describe_dir / "Account.json").write_text(json.dumps(old))
    early = Platform(
        tmp_path / "p", describe_dir, ["Account"], TEST_SPARK_CONF, salesforce=resource(org), initial_load=True
    )
    early.run()
    with org.store.transaction() as txn:
        txn.update("Account", ids[0], {"Rating": "Hot", "Website": 'https://example.com/a,b?c="d"'})
    meta = early.materialization(catch_up(early, org), "Account")
    assert meta["unknown_fields"] == 2 and meta["unknown_field_names"] == ["Rating", "Website"]

    with org.store.transaction() as txn:
        txn.update("Account", ids[1], {"Rating": "Warm"})
    later = make_platform(tmp_path, org, objects=["Account"])  # describe() from the org, kept with the table
    meta = later.materialization(catch_up(later, org), "Account")
    assert (meta["columns_added"], meta["schema_backfill"], meta["unknown_fields"]) == (2, 1, 0)
    rows = later.rows("Account")
    assert rows[ids[1]]["Rating"] == "Warm" and rows[ids[0]]["_sf_dirty_since"] is not None
    kept = stored_describe(later.defs.resources["warehouse"], "Account")
    assert "Rating" in {f["name"] for f in kept["fields"]}  # kept with the table for the next runs
    run_sensor_requests(later)  # reconcile of the record that carried the fields before their columns existed
    assert_equal_to_org(later, org, ["Account"])


def test_ids_the_org_refuses_or_does_not_know_leave_reconciliation_counted_and_fail_a_check(tmp_path, org):
    """Gap events are the landing zone's word: an id with a wrong case-safe suffix fails a whole sObject
    Collections call (MALFORMED_ID for the batch, as Salesforce answers), which must not stop the object's
    reconcile for good, and 101 invented ids must not stay rows. The refused id is isolated, the real record
    reconciles, the invented ids end deleted as docs/design/contract.md §6 says, and the org_knows_ids check names
    both."""
    from salesforce_emulator.ids import make_id
    from salesforce_emulator.landing_lines import event

    Workload(org, seed=17).build_org(accounts=5)
    platform = make_platform(tmp_path, org, objects=["Account"])
    platform.run()
    real = org.store.ids("Account")[0]
    with org.store.transaction() as txn:
        txn.update("Account", real, {"Rating": "Hot"})
    refused = real[:15] + "ZZZ"
    invented = [make_id("001", 10**9 + n) for n in range(101)]
    platform.land([event("Account", "GAP_UPDATE", [real, refused, *invented], int(time.time() * 1000))])
    platform.run(close_after=0)

    org.reset_request_counts()
    [request] = sensor_requests(platform)
    result = platform.execute(request, checks=True)
    assert result.success
    rows = platform.rows("Account")
    assert rows[real]["Rating"] == "Hot" and rows[real]["_sf_dirty_since"] is None
    for record_id in (refused, *invented):
        assert rows[record_id]["_sf_deleted"] and rows[record_id]["_sf_dirty_since"] is None, record_id
    meta = platform.materialization_of("Account")
    assert (meta["ids_refused"], meta["reconciled_gone"], meta["reconciled_found"]) == (1, 101, 1)
    assert org.request_counts()["composite_retrieve"] == 3  # the failed call, the refused id alone, the others
    from cdc_assets.checks import ORG_KNOWS_IDS

    check = platform.check_results(result, "Account")[ORG_KNOWS_IDS]
    assert not check.passed
    assert f"refused 1 record ids as malformed ('{refused}': MALFORMED_ID: malformed id {refused})" in check.description
    assert "101 dirty ids are unknown to the org, more than 100" in check.description
    assert sensor_requests(platform) == []  # nothing dirty is left: no reconcile retried forever
