"""Formula fields as replica columns (`formulas:` in replication.yaml) against the real HTTPS emulator org.

A refresh (requested by the sensor `formulas_sensor`, a Bulk API 2.0 query through the platform's resource) makes
the formula columns equal to the org, cross-object changes included; change events never write them (an update
keeps them, an insert leaves them null); an incremental pass reads only records whose SystemModstamp moved (so it
misses a cross-object change: the full pass is for those) and records CDC inserted after the previous read; the
check `formulas_fresh` fails when the values are older than twice the full-pass interval.
"""

from __future__ import annotations

import time

import dagster as dg
import pytest
from harness import Platform, comparable
from org_compare import differences, formula_differences
from settings import TEST_SPARK_CONF
from subscriber_harness import resource

from cdc_assets.formulas.freshness import FORMULAS_FRESH
from cdc_assets.names import replica_key
from object_schema.describe import FORMULAS_AT, ObjectSchema
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload
from sensors.formulas import SENSOR_NAME as FORMULAS_SENSOR

OBJECTS = ["Account", "Contact", "Opportunity"]


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def formula_platform(tmp_path, emu: Emulator, **formulas) -> Platform:
    return Platform(
        tmp_path / "p",
        None,
        OBJECTS,
        TEST_SPARK_CONF,
        salesforce=resource(emu),
        initial_load=True,
        formulas={"refresh_every": 3600, **formulas},
    )


def formula_names(emu: Emulator, name: str) -> list[str]:
    return ObjectSchema.from_describe(emu.store.describe(name)).with_formulas().formula_names


def cdc_columns(platform: Platform, emu: Emulator, name: str) -> dict:
    """The replica's rows without the formula columns (and the write time)."""
    formulas = {*formula_names(emu, name), FORMULAS_AT}
    rows = {i: {k: v for k, v in r.items() if k not in formulas} for i, r in platform.rows(name).items()}
    return comparable(rows)


def assert_equal_to_org(platform: Platform, emu: Emulator) -> None:
    for name in OBJECTS:
        rows = platform.rows(name)
        assert differences(emu, name, rows) == [], name
        assert formula_differences(emu, name, rows) == [], name


def run_replica(
    platform: Platform, name: str, *, mode: str = "apply", full: bool = False, checks: bool = False
) -> dg.ExecuteInProcessResult:
    """One run of one replica in `mode` (formulas: as the sensor requests it; `full`: a forced full pass), with its
    asset checks right after it when `checks`."""
    key = replica_key(name)
    assets = [a for a in platform.executable_assets() if key in a.keys]
    if checks:
        assets += [c for c in platform.defs.asset_checks or [] if key in {k.asset_key for k in c.check_keys}]
    config = {"mode": mode, **({"formulas_full": True} if full else {})}
    result = dg.materialize(
        assets,
        resources=platform.defs.resources,
        instance=platform.instance,
        selection=[key],
        run_config={"ops": {key.to_python_identifier(): {"config": config}}},
    )
    assert result.success
    return result


def refresh(platform: Platform, name: str, *, full: bool = False) -> dict:
    """A formula refresh run of one replica; its metadata."""
    return platform.materialization(run_replica(platform, name, mode="formulas", full=full), name)


def update(emu: Emulator, name: str, record_id: str, **values) -> None:
    with emu.store.transaction() as txn:
        txn.update(name, record_id, values)


def create(emu: Emulator, name: str, **values) -> str:
    with emu.store.transaction() as txn:
        return txn.create(name, values)


def parent_with_contacts(emu: Emulator) -> tuple[str, list[str]]:
    contacts = [c for c in emu.store.snapshot("Contact") if not c["IsDeleted"] and c["AccountId"]]
    account = contacts[0]["AccountId"]
    return account, [c["Id"] for c in contacts if c["AccountId"] == account]


def test_a_refresh_makes_formula_columns_equal_the_org_and_cdc_never_writes_them(tmp_path, org):
    workload = Workload(org, seed=11)
    workload.build_org(accounts=12)
    platform = formula_platform(tmp_path, org)
    assert platform.run().success  # the initial load reads the formula values with the snapshot
    assert_equal_to_org(platform, org)

    loaded = {o: platform.rows(o) for o in OBJECTS}
    account, children = parent_with_contacts(org)
    industry = "Banking" if loaded["Account"][account]["Industry"] != "Banking" else "Energy"
    # A parent's change moves its contacts' cross-object formulas with no event on the contacts; the account's own
    # formulas move with its revenue; a new contact; then a workload of creates, updates, deletes and undeletes.
    update(org, "Account", account, Industry=industry, AnnualRevenue=75_000_000, NumberOfEmployees=300)
    new_contact = create(org, "Contact", LastName="Newcomer", AccountId=account)
    workload.run(changes=60)
    org.flush_cdc()
    assert platform.run(close_after=0).success
    platform.run_sensor()  # reconcile what the workload made dirty (person account names)
    applied = {o: platform.rows(o) for o in OBJECTS}
    assert all(differences(org, o, applied[o]) == [] for o in OBJECTS)
    for name in OBJECTS:  # an update keeps the formula values it found, an insert leaves them null
        for rid, row in applied[name].items():
            kept = loaded[name].get(rid, dict.fromkeys([*formula_names(org, name), FORMULAS_AT]))
            assert {f: row[f] for f in [*formula_names(org, name), FORMULAS_AT]} == {
                f: kept[f] for f in [*formula_names(org, name), FORMULAS_AT]
            }, (name, rid)
    assert applied["Contact"][new_contact]["Account_Industry__c"] is None
    assert {applied["Contact"][c]["Account_Industry__c"] for c in children} == {loaded["Account"][account]["Industry"]}
    assert formula_differences(org, "Contact", applied["Contact"]), "the contacts' formulas should be stale now"

    cdc_before = {o: cdc_columns(platform, org, o) for o in OBJECTS}
    [request] = platform.run_sensor(FORMULAS_SENSOR)  # one run refreshing every object keeping formulas
    assert request.tags["cdc/mode"] == "formulas" and request.asset_selection == [replica_key(o) for o in OBJECTS]
    assert_equal_to_org(platform, org)
    assert {platform.rows("Contact")[c]["Account_Industry__c"] for c in children} == {industry}
    assert {o: cdc_columns(platform, org, o) for o in OBJECTS} == cdc_before  # no CDC column written
    meta = platform.materialization_of("Contact")
    live = sum(1 for c in org.store.snapshot("Contact") if not c["IsDeleted"])
    assert (meta["mode"], meta["formulas_full_pass"], meta["formulas_rows_refreshed"]) == ("formulas", 1, live)
    assert meta["formulas_not_in_replica"] == 0 and meta["api_calls"] >= 3  # job, status, results
    assert meta["formulas_missing"] == 0 and meta["formulas_oldest_age_seconds"] < 120
    again = platform.sensor_requests(FORMULAS_SENSOR)  # the same window: the same run key (requested once)
    assert [r.run_key for r in again] == [request.run_key]

    checked = platform.run(checks=True)
    for name in OBJECTS:
        assert platform.check_results(checked, name)[FORMULAS_FRESH].passed


def test_an_incremental_pass_reads_moved_records_and_late_inserts_and_a_full_pass_the_cross_object_changes(
    tmp_path, org
):
    Workload(org, seed=12).build_org(accounts=10)
    platform = formula_platform(tmp_path, org, full_every=86400, overlap=0)
    assert platform.run().success
    assert refresh(platform, "Contact")["formulas_full_pass"] == 1  # no refresh yet: a full pass
    assert refresh(platform, "Account")["formulas_full_pass"] == 1

    account, children = parent_with_contacts(org)
    time.sleep(0.05)
    update(org, "Account", account, Industry="Shipping", AnnualRevenue=500_000, NumberOfEmployees=10)
    moved = org.store.ids("Contact")[-1]
    update(org, "Contact", moved, Title="Moved")
    org.flush_cdc()
    assert platform.run(close_after=0).success
    meta = refresh(platform, "Account")
    assert (meta["formulas_full_pass"], meta["formulas_rows_read"]) == (0, 1)
    assert formula_differences(org, "Account", platform.rows("Account")) == []
    meta = refresh(platform, "Contact")
    assert (meta["formulas_full_pass"], meta["formulas_rows_read"]) == (0, 1)  # only its own change is seen
    stale = formula_differences(org, "Contact", platform.rows("Contact"), limit=0)
    assert stale and all(d.split()[1].split(".")[0] in children for d in stale), stale

    # A contact created in the org and read by a refresh before CDC brought it (not in the replica: skipped), then
    # inserted by CDC with no formula values: the next incremental pass goes back to it.
    late = create(org, "Contact", LastName="Late", AccountId=account)
    meta = refresh(platform, "Contact")
    assert meta["formulas_not_in_replica"] == 1
    org.flush_cdc()
    assert platform.run(close_after=0).success
    assert platform.rows("Contact")[late][FORMULAS_AT] is None
    assert platform.materialization_of("Contact")["formulas_missing"] == 1
    time.sleep(0.05)
    meta = refresh(platform, "Contact")
    assert meta["formulas_full_pass"] == 0 and meta["formulas_missing"] == 0
    assert platform.rows("Contact")[late]["Account_Industry__c"] == "Shipping"

    meta = refresh(platform, "Contact", full=True)  # the full pass sees the cross-object change
    assert meta["formulas_full_pass"] == 1
    assert_equal_to_org(platform, org)


def test_formulas_fresh_fails_when_values_are_older_than_twice_the_refresh_interval(tmp_path, org):
    Workload(org, seed=13).build_org(accounts=4)
    # Every refresh a full pass: the limit is 30 s, room for a run's apply step between the read and the check on
    # a loaded machine.
    platform = formula_platform(tmp_path, org, refresh_every=15)
    assert platform.run().success
    fresh = run_replica(platform, "Contact", mode="formulas", checks=True)
    assert platform.check_results(fresh, "Contact")[FORMULAS_FRESH].passed
    # The values just read age past a 2 s limit (a refresh every second) with no 30 s wait; the refresh below gets
    # the 30 s limit back.
    platform.set_options(formulas={"refresh_every": 1})
    time.sleep(2.1)
    checked = run_replica(platform, "Contact", checks=True)  # a CDC run: it reads no formula value
    stale = platform.check_results(checked, "Contact")[FORMULAS_FRESH]
    assert not stale.passed and FORMULAS_SENSOR in stale.description
    assert stale.metadata["threshold_seconds"].value == 2
    assert stale.metadata["formulas_oldest_age_seconds"].value > 2
    platform.set_options(formulas={"refresh_every": 15})
    refreshed = run_replica(platform, "Contact", mode="formulas", checks=True)
    assert platform.check_results(refreshed, "Contact")[FORMULAS_FRESH].passed


def test_the_changefeed_carries_formula_changes_and_nothing_for_a_refresh_that_finds_them_unchanged(tmp_path, org):
    from deltalake import DeltaTable
    from org_compare import live_rows

    from replication.changefeed.reader import ChangefeedReader, replay

    Workload(org, seed=14).build_org(accounts=5)
    feed = tmp_path / "feed"
    platform = formula_platform(tmp_path, org)
    platform.set_options(changefeed={"uri": str(feed), "initial_scan": True})
    assert platform.run().success  # initial load, then the feeds' initial scan

    def records(name: str) -> list[dict]:
        return [r for _, r in ChangefeedReader(str(feed / name)).read() if "key" in r]

    scanned = len(records("Contact"))
    refresh(platform, "Contact")  # the org's values as the initial load read them: no change a consumer sees
    assert platform.run().success
    assert len(records("Contact")) == scanned

    account, children = parent_with_contacts(org)
    update(org, "Account", account, Industry="Agriculture")
    org.flush_cdc()
    assert platform.run(close_after=0).success
    assert len(records("Contact")) == scanned  # no event on the contacts
    refresh(platform, "Contact")
    assert platform.run().success
    changed = records("Contact")[scanned:]
    assert sorted(r["key"][0] for r in changed if "update" in r) == sorted(children)
    assert {r["newImage"]["Account_Industry__c"] for r in changed if "update" in r} == {"Agriculture"}
    assert replay(records("Contact")) == live_rows(DeltaTable(str(platform.warehouse / "Contact")))
