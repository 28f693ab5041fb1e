"""The poll cursor: carried by every step that commits to a polled replica, and chosen from describe() for objects
without SystemModstamp (history objects: CreatedDate; share objects: LastModifiedDate) or without IsDeleted."""

from __future__ import annotations

import time

import pytest
from org_compare import differences
from poll_harness import poll_platform, poll_state, run_replicas, update

from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload


def test_a_resync_of_a_polled_object_keeps_its_cursor_so_a_late_commit_is_still_read(tmp_path, org, spark):
    """The resync marks a purged record deleted at the host's clock, ahead of the org's newest SystemModstamp; a poll
    restarting behind the replica's newest row would then miss a commit stamped before it."""
    Workload(org, seed=5).build_org(accounts=10)
    platform = poll_platform(tmp_path, org, objects=["Account"], hard_delete_check_every=86400)
    run_replicas(platform, ["Account"])
    run_replicas(platform, ["Account"])
    cursor = poll_state(platform, "Account").cursor
    purged = org.store.ids("Account")[-1]
    with org.store.transaction() as txn:
        txn.delete("Account", [purged])
    with org.store.transaction() as txn:
        txn.purge("Account", [purged])
    time.sleep(3)  # the org is quiet; the host's clock moves on
    resynced = run_replicas(platform, ["Account"], mode="resync")
    assert platform.materialization(resynced, "Account")["missing_marked_deleted"] == 1
    assert poll_state(platform, "Account").cursor == cursor

    org.late_commits(1, 1000)  # stamped a second before the org's newest commit: within the 2 s overlap
    update(org, "Account", org.store.ids("Account")[0], Name="committed after the resync")
    polled = run_replicas(platform, ["Account"])
    assert platform.materialization(polled, "Account")["poll_rows_written"] == 1
    assert differences(org, "Account", platform.rows("Account")) == []


def test_a_reconcile_run_of_a_polled_object_keeps_its_cursor(tmp_path, org, spark):
    Workload(org, seed=6).build_org(accounts=5)
    platform = poll_platform(tmp_path, org, objects=["Account"], hard_delete_check_every=86400)
    run_replicas(platform, ["Account"])
    update(org, "Account", org.store.ids("Account")[0], Name="moves the cursor")
    run_replicas(platform, ["Account"])
    cursor = poll_state(platform, "Account").cursor
    # A change event of an object not replicated: the reconcile run's apply step has a checkpoint to move, so commits.
    platform.land([event("Contact", "UPDATE", ["003000000000001AAA"], int(time.time() * 1000), Title="x")])
    platform.run()
    assert poll_state(platform, "Account").cursor == cursor
    run_replicas(platform, ["Account"], mode="reconcile")
    assert poll_state(platform, "Account").cursor == cursor


def _history(txn, account: str, n: int) -> None:
    for i in range(n):
        txn.create(
            "AccountHistory",
            {"AccountId": account, "Field": "Name", "DataType": "Text", "OldValue": f"old {i}", "NewValue": f"new {i}"},
        )


def _share(txn, account: str, user: str) -> str:
    return txn.create(
        "AccountShare",
        {
            "AccountId": account,
            "UserOrGroupId": user,
            "AccountAccessLevel": "Read",
            "OpportunityAccessLevel": "None",
            "RowCause": "Manual",
        },
    )


@pytest.mark.parametrize(
    ("name", "cursor"),
    [("AccountHistory", "CreatedDate"), ("AccountShare", "LastModifiedDate"), ("UserRole", "SystemModstamp")],
)
def test_objects_without_systemmodstamp_or_isdeleted_are_polled_by_the_field_they_have(tmp_path, org, name, cursor):
    """A field history object (only CreatedDate), a share object (LastModifiedDate, no SystemModstamp) and a setup
    object without IsDeleted: loaded, then polled, each by its own cursor field, equal to the org."""
    assert {"SystemModstamp", "IsDeleted"} - {f["name"] for f in org.store.describe(name)["fields"]}
    Workload(org, seed=2).build_org(accounts=3)
    account, user = org.store.ids("Account")[0], org.store.default_user_id
    with org.store.transaction() as txn:
        if name == "AccountHistory":
            _history(txn, account, 3)
        elif name == "AccountShare":
            share = _share(txn, account, user)
        else:
            role = txn.create("UserRole", {"Name": "CEO", "DeveloperName": "CEO"})
    platform = poll_platform(tmp_path, org, objects=[name], hard_delete_check_every=86400)
    run_replicas(platform, [name])
    with org.store.transaction() as txn:
        if name == "AccountHistory":
            _history(txn, account, 2)
        elif name == "AccountShare":
            txn.update("AccountShare", share, {"AccountAccessLevel": "Edit"})
            _share(txn, org.store.ids("Account")[1], user)
        else:
            txn.update("UserRole", role, {"RollupDescription": "Chief"})
            txn.create("UserRole", {"Name": "CFO", "ParentRoleId": role})
    polled = run_replicas(platform, [name], compare_ids=True)
    meta = platform.materialization(polled, name)
    assert meta["poll_cursor_field"] == cursor and meta["poll_rows_written"] == 2
    assert meta["hard_delete_checked"] == 1 and meta["hard_deleted"] == 0  # the Id comparison works without them
    assert differences(org, name, platform.rows(name)) == []
    assert poll_state(platform, name).cursor_field == cursor
