"""The Id comparison of a polled object, both ways (replication/poll/compare.py): records committed later than the
overlap are found, deletes beyond `poll_max_delete_share` wait for a confirmation, a record that reappears in the
org is restored."""

from __future__ import annotations

from org_compare import differences
from poll_harness import poll_platform, poll_state, run_replicas, update

from cdc_assets.checks import POLL_HARD_DELETES, POLL_OVERLAP
from salesforce_emulator.schema import get_object
from salesforce_emulator.workload import Workload


def checks_of(platform, result, name="Account") -> dict:
    return {k: r for k, r in platform.check_results(result, name).items() if k in (POLL_HARD_DELETES, POLL_OVERLAP)}


def test_a_record_committed_further_behind_the_cursor_than_the_overlap_is_found_by_the_next_comparison(
    tmp_path, org, spark
):
    Workload(org, seed=3).build_org(accounts=10)
    platform = poll_platform(tmp_path, org, objects=["Account"], poll_overlap=2, hard_delete_check_every=86400)
    run_replicas(platform, ["Account"])
    update(org, "Account", org.store.ids("Account")[0], Name="moves the cursor")
    run_replicas(platform, ["Account"])  # polls; no comparison due: the initial load read every Id
    cursor = poll_state(platform, "Account").cursor

    org.late_commits(1, 5000)  # committed now, stamped 5 s behind the cursor: the 2 s overlap misses it
    with org.store.transaction() as txn:
        late = txn.create("Account", {"Name": "committed late"})
    missed = run_replicas(platform, ["Account"])  # no comparison due
    assert platform.materialization(missed, "Account")["poll_rows_written"] == 0
    assert late not in platform.rows("Account")
    assert poll_state(platform, "Account").cursor == cursor

    found = run_replicas(platform, ["Account"], compare_ids=True, checks=True)
    meta = platform.materialization(found, "Account")
    assert meta["poll_late_found"] == 1 and meta["hard_deleted"] == 0
    assert differences(org, "Account", platform.rows("Account")) == []
    overlap = checks_of(platform, found)[POLL_OVERLAP]
    assert not overlap.passed and "Raise poll_overlap" in overlap.description
    again = run_replicas(platform, ["Account"], compare_ids=True, checks=True)
    assert platform.materialization(again, "Account")["poll_late_found"] == 0
    assert all(r.passed for r in checks_of(platform, again).values())


def test_a_comparison_deleting_too_many_records_waits_for_a_confirmation_and_a_record_that_reappears_is_restored(
    tmp_path, org, spark
):
    Workload(org, seed=9).build_org(accounts=20)
    platform = poll_platform(tmp_path, org, objects=["Account"], hard_delete_check_every=0)  # every run compares
    run_replicas(platform, ["Account"])
    run_replicas(platform, ["Account"])
    ids = org.store.ids("Account")
    gone = ids[:3]  # 3 of 20 live records: 15 %, over the default 5 %
    kept_rows = [org.store.get_row("Account", i) for i in gone]
    with org.store.transaction() as txn:
        txn.delete("Account", gone)
    with org.store.transaction() as txn:
        txn.purge("Account", gone)  # deleted and purged between two polls: only the Id comparison can tell

    refused = run_replicas(platform, ["Account"], checks=True)
    meta = platform.materialization(refused, "Account")
    assert (meta["hard_deleted"], meta["hard_delete_refused"]) == (0, 3)
    rows = platform.rows("Account")
    assert all(not rows[i]["_sf_deleted"] for i in gone)
    check = checks_of(platform, refused)[POLL_HARD_DELETES]
    assert not check.passed and "confirm_deletes: true" in check.description

    confirmed = run_replicas(platform, ["Account"], confirm_deletes=True, checks=True)
    assert platform.materialization(confirmed, "Account")["hard_deleted"] == 3
    assert all(r.passed for r in checks_of(platform, confirmed).values())
    assert differences(org, "Account", platform.rows("Account")) == []

    # The integration user sees one of them again (a sharing rule restored): the org returns it, live, with the
    # SystemModstamp it had, older than the replica's deletion. The next poll restores it.
    back = next(r for r in kept_rows if r["Id"] == gone[0])
    with org.store.transaction():
        org.store.insert_row(get_object("Account"), {**back, "IsDeleted": 0})
    restored = run_replicas(platform, ["Account"])
    assert platform.materialization(restored, "Account")["poll_restored"] == 1
    assert not platform.rows("Account")[gone[0]]["_sf_deleted"]
    assert differences(org, "Account", platform.rows("Account")) == []


def test_the_polls_after_an_initial_load_compare_no_ids_until_a_comparison_is_due_from_the_load(tmp_path, org, spark):
    Workload(org, seed=4).build_org(accounts=30)
    platform = poll_platform(tmp_path, org, objects=["Account"], hard_delete_check_every=86400)
    run_replicas(platform, ["Account"])  # the initial load: a snapshot of every record
    gone = org.store.ids("Account")[0]
    with org.store.transaction() as txn:
        txn.delete("Account", [gone])
    with org.store.transaction() as txn:
        txn.purge("Account", [gone])  # only an Id comparison can tell

    org.reset_request_counts()
    run_replicas(platform, ["Account"])
    assert org.request_counts().get("bulk_query_job", 0) == 0  # the load was the comparison
    assert not platform.rows("Account")[gone]["_sf_deleted"]

    platform.set_options(hard_delete_check_every=0)  # due now
    found = run_replicas(platform, ["Account"])
    assert org.request_counts().get("bulk_query_job", 0) == 1
    assert platform.materialization(found, "Account")["hard_deleted"] == 1
    assert differences(org, "Account", platform.rows("Account")) == []
