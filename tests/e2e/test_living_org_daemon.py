"""A living org under the real Dagster daemon: while a workload runs, the org's admin adds fields, grants and
revokes read access, changes a field's type and deletes a field, all through the APIs Salesforce documents (Tooling
API `CustomField`, `PermissionSet`, `FieldPermissions`, `PermissionSetAssignment`). The sensors alone keep the
replicas: when they settle, every replica equals the org field by field, a field's values written while the
platform could not read it are backfilled, and a deleted field's column keeps its last values (cdc_assets/
field_access.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from deltalake import DeltaTable
from org_compare import differences
from simple_salesforce import Salesforce

from cdc_assets.schemas import marked_fields
from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client

pytestmark = pytest.mark.e2e

TIER, REGION, SCORE = "Loyalty_Tier__c", "Region__c", "Score__c"
DESCRIBE_EVERY = 15  # seconds: the living_stack fixture's describe_every (tests/e2e/conftest.py)
CHANGES, RATE = 150, 50


def replica(stack) -> DeltaTable:
    return DeltaTable(str(stack.warehouse / "Account"))


def settled_until(stack, holds: Callable[[], bool], timeout_seconds: float = 300.0) -> None:
    """Wait for the sensors to settle and `holds()`: what the describe sensor finds is found within its window
    (DESCRIBE_EVERY) after the org changed, which may be after the workload's runs settled."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        stack.wait_settled(timeout_seconds=600)
        if holds() or time.monotonic() > deadline:
            return
        time.sleep(5)


def admin_of(emu: Emulator) -> Salesforce:
    return simple_salesforce_client(emu, token=emu.admin_token)


def add_field(admin: Salesforce, name: str, metadata: dict) -> str:
    return admin.restful(
        "tooling/sobjects/CustomField", method="POST", json={"FullName": f"Account.{name}", "Metadata": metadata}
    )["id"]


def grant_read(admin: Salesforce, permission_set: str, name: str) -> str:
    grant = {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{name}", "PermissionsRead": True}
    return admin.FieldPermissions.create(grant)["id"]


def set_values(emu: Emulator, values: dict[str, dict]) -> None:
    with emu.store.transaction(user_id=emu.store.admin_user_id) as txn:
        for record_id, fields in values.items():
            txn.update("Account", record_id, fields)


def test_fields_added_hidden_retyped_and_deleted_under_the_daemon_leave_every_replica_equal_to_the_org(living_stack):
    stack, emu = living_stack, living_stack.emu
    stack.workload.run(changes=CHANGES)
    stack.wait_settled(timeout_seconds=600)  # every replica loaded
    admin = admin_of(emu)
    with emu.store.transaction() as txn:  # records of the test's own: the workload changes only those it made
        ids = [txn.create("Account", {"Name": f"Living {n}"}) for n in range(6)]
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})

    # Added and readable: the first events naming them add the columns.
    score = add_field(admin, SCORE, {"type": "Number", "label": "Score", "precision": 8, "scale": 2})
    region = add_field(admin, REGION, {"type": "Text", "label": "Region", "length": 40})
    grant_read(admin, permission_set, SCORE)
    grant_read(admin, permission_set, REGION)
    # Added hidden: values loaded into it reach no event; granted later, the describe sensor finds it.
    add_field(admin, TIER, {"type": "Text", "label": "Loyalty Tier", "length": 40})
    set_values(emu, {i: {SCORE: 10.5 + n, REGION: f"R{n}", TIER: f"Loaded {n}"} for n, i in enumerate(ids)})
    stack.workload.run(changes=CHANGES, rate=RATE)
    tier = grant_read(admin, permission_set, TIER)
    stack.workload.run(changes=CHANGES, rate=RATE)
    settled_until(stack, lambda: TIER in stack.rows("Account")[ids[0]])
    rows = stack.rows("Account")
    assert [rows[i][TIER] for i in ids[:2]] == ["Loaded 0", "Loaded 1"], "the describe sensor backfilled the tier"

    # Hidden again: its column is kept, never nulled; a value written meanwhile comes back with read access.
    admin.FieldPermissions.update(tier, {"PermissionsRead": False})
    set_values(emu, {ids[0]: {TIER: "Changed while hidden"}})
    # A type the column holds (Number(8,2) -> Number(16,4)), then a deleted field.
    admin.restful(
        f"tooling/sobjects/CustomField/{score}", method="PATCH", json={"Metadata": {"precision": 16, "scale": 4}}
    )
    set_values(emu, {ids[1]: {SCORE: 123456789.1234}})
    stack.workload.run(changes=CHANGES, rate=RATE)
    admin.restful(f"tooling/sobjects/CustomField/{region}", method="DELETE")
    stack.workload.run(changes=CHANGES, rate=RATE)
    settled_until(stack, lambda: set(marked_fields(replica(stack))) == {TIER, REGION})
    assert {k: v["status"] for k, v in marked_fields(replica(stack)).items()} == {TIER: "hidden", REGION: "removed"}
    assert stack.rows("Account")[ids[0]][TIER] == "Loaded 0"  # kept, not nulled, not the hidden value

    grant_read(admin, permission_set, TIER)
    with emu.store.transaction() as txn:
        created = txn.create("Account", {"Name": "Created after the deletion"})
    stack.workload.run(changes=CHANGES, rate=RATE)
    settled_until(stack, lambda: TIER not in marked_fields(replica(stack)))

    for name in stack.objects:
        assert differences(emu, name, stack.rows(name), limit=20) == [], name
    rows = stack.rows("Account")
    assert rows[ids[0]][TIER] == "Changed while hidden" and rows[ids[1]][SCORE] == 123456789.1234
    # The deleted field's column keeps its last values; a row created after it has null there.
    assert [rows[i][REGION] for i in ids] == [f"R{n}" for n in range(len(ids))] and rows[created][REGION] is None
    assert {k: v["status"] for k, v in marked_fields(replica(stack)).items()} == {REGION: "removed"}
    with stack.instance() as instance:
        added = {f for meta in stack.materializations(instance, "Account") for f in meta.get("fields_added") or []}
    assert {SCORE, REGION, TIER} <= added
