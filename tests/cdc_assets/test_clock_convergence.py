"""Replicas converge under the org's real clock: timestamps repeating across transactions, late commits
(rows stamped behind rows already visible), and a reconcile whose fetched SystemModstamp is older than the replica
row. The org is the real HTTPS emulator; runs are Dagster's materialize() over real Spark and Delta tables."""

from __future__ import annotations

import itertools
import time
from datetime import UTC

from test_sync import OBJECTS, assert_equal_to_org, catch_up, make_platform, org, run_sensor_requests  # noqa: F401

from salesforce_emulator import Emulator
from salesforce_emulator.changes import resolve_object
from salesforce_emulator.testing import header, read_landed_events
from salesforce_emulator.values import iso_to_ms, ms_to_iso
from salesforce_emulator.workload import Workload


def update(emu: Emulator, record_id: str, **values) -> None:
    with emu.store.transaction() as txn:
        txn.update("Account", record_id, values)


def move_stamp_back(emu: Emulator, record_id: str, to_ms: int) -> None:
    """What the emulator never does by itself (Salesforce documents no such case): the org's SystemModstamp of a
    record goes back, as in a reported reproduction (01:52:25.209 -> 01:52:22.795)."""
    with emu.store.lock:
        emu.store.update_row(resolve_object("Account"), record_id, {"SystemModstamp": ms_to_iso(to_ms)})


def test_equal_stamps_and_late_commits_through_cdc_end_with_every_replica_equal_to_the_org(tmp_path, org):
    # No person accounts: their Names are fetched by a reconcile, and this test shows no record needs one.
    workload = Workload(org, seed=8, person_accounts=False)
    workload.build_org(accounts=30)
    platform = make_platform(tmp_path, org)
    platform.run()
    time.sleep(1.1)  # late commits below go 1 s back: behind rows already visible, never behind their own records
    for _ in range(3):
        org.same_timestamp_commits(15)
        workload.run(changes=60)
        org.late_commits(15, 1000)
        workload.run(changes=60)
        catch_up(platform, org)
    events = [header(e) for e in read_landed_events(org.landing_dir)]
    stamps = [h["commitTimestamp"] for h in events]
    numbers = {}
    for h in events:
        numbers.setdefault(h["commitTimestamp"], set()).add(h["commitNumber"])
    assert any(len(n) > 1 for n in numbers.values()), "no two transactions shared a millisecond"
    assert any(later < earlier for earlier, later in itertools.pairwise(stamps)), "no transaction committed late"
    assert sum(platform.materialization_of(n)["dirty_records"] for n in OBJECTS) == 0
    assert_equal_to_org(platform, org)


def test_a_reconcile_ends_on_the_org_value_even_when_its_stamp_is_older_than_the_replica_row(tmp_path, org):
    Workload(org, seed=3).build_org(accounts=5)
    platform = make_platform(tmp_path, org, objects=["Account"])
    platform.run()
    # a business account: a person account's Name is derived from its name parts, not written
    record = next(i for i in org.store.ids("Account") if not org.store.get_row("Account", i)["IsPersonAccount"])
    update(org, record, Name="first")
    catch_up(platform, org)
    replica_stamp = platform.rows("Account")[record]["_sf_commit_ts"].replace(tzinfo=UTC)
    org.set_faults(gap_fraction=1.0)
    update(org, record, Name="the org's value")  # a gap event: the record becomes dirty
    org.set_faults(gap_fraction=0.0)
    move_stamp_back(org, record, int(replica_stamp.timestamp() * 1000) - 2414)
    catch_up(platform, org)
    assert platform.rows("Account")[record]["_sf_dirty_since"] is not None

    requests = run_sensor_requests(platform)
    assert [r.tags["cdc/mode"] for r in requests] == ["reconcile"]
    row = platform.rows("Account")[record]
    org_row = org.store.get_row("Account", record)
    assert row["Name"] == "the org's value" and row["_sf_dirty_since"] is None
    assert (
        int(row["_sf_commit_ts"].replace(tzinfo=UTC).timestamp() * 1000)
        == iso_to_ms(org_row["SystemModstamp"])
        < int(replica_stamp.timestamp() * 1000)
    )
    assert_equal_to_org(platform, org, ["Account"])
    assert run_sensor_requests(platform) == []  # converged for good: nothing dirty, nothing to redo
