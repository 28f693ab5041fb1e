"""A living org under the real Dagster daemon: while a workload runs, the org's admin adds fields, grants and
revokes read access, changes a field's type (on a CDC object and on a polled one), deletes a field and creates it
again with another type, all through the APIs Salesforce documents (Tooling API `CustomField`, `PermissionSet`,
`FieldPermissions`, `PermissionSetAssignment`). The sensors alone keep the replicas, and no run fails: when they
settle, every replica equals the org field by field, a field's values written while the platform could not read it
are backfilled, a deleted field's column keeps its last values until a new field takes its name, and a column whose
field changed type holds the org's values in the new type (replication/field_access.py, retype.py). How long each
change took to reach the replica is printed (`make e2e` runs with -s)."""

from __future__ import annotations

import time
from collections.abc import Callable

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from e2e_admin import add_field, admin_of, grant_read, set_values, settled_until
from org_compare import differences
from simple_salesforce import Salesforce

from replication.schemas import field_marks, marked_fields

pytestmark = pytest.mark.e2e

TIER, REGION, SCORE, RATING = "Loyalty_Tier__c", "Region__c", "Score__c", "Rating__c"  # RATING: on Contact
DESCRIBE_EVERY = 15  # seconds: the living_stack fixture's describe_every (tests/e2e/conftest.py)
CHANGES, RATE = 150, 50


def replica(stack, name: str = "Account") -> DeltaTable:
    return DeltaTable(str(stack.warehouse / name))


def column_type(stack, name: str, column: str) -> str:
    return str(pa.schema(replica(stack, name).schema().to_arrow()).field(column).type)


def followed_in(stack, holds: Callable[[], bool], what: str, *, since: float, timeout_seconds: float = 600.0) -> float:
    """Seconds from `since` (time.monotonic() when the org changed) until the replica shows it (`holds()`, asked
    every second), printed; then waits for the sensors to settle."""
    started = since
    while not holds() and time.monotonic() - started < timeout_seconds:
        time.sleep(1)
    seconds = time.monotonic() - started
    print(f"\n{what}: followed in {seconds:.0f} s")
    settled_until(stack, holds)
    assert holds(), what
    return seconds


def to_text(admin: Salesforce, field_id: str) -> None:
    admin.restful(
        f"tooling/sobjects/CustomField/{field_id}",
        method="PATCH",
        json={"Metadata": {"type": "Text", "length": 255, "precision": None, "scale": None}},
    )


def test_fields_added_hidden_retyped_deleted_and_created_again_under_the_daemon_leave_every_replica_equal_to_the_org(
    living_stack,
):
    stack, emu = living_stack, living_stack.emu
    stack.workload.run(changes=CHANGES)
    stack.wait_settled(timeout_seconds=600)  # every replica loaded
    admin = admin_of(emu)
    with emu.store.transaction() as txn:  # records of the test's own: the workload changes only those it made
        ids = [txn.create("Account", {"Name": f"Living {n}"}) for n in range(6)]
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})

    contacts = emu.store.ids("Contact")[:4]
    rating = add_field(admin, RATING, {"type": "Number", "label": "Rating", "precision": 3, "scale": 0}, "Contact")
    grant_read(admin, permission_set, RATING, "Contact")
    set_values(emu, {c: {RATING: 10 + n} for n, c in enumerate(contacts)}, "Contact")  # a poll reads them
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
    assert stack.rows("Contact")[contacts[1]][RATING] == 11.0

    # Number -> Text on a CDC object, while the workload runs and text values the old column cannot hold arrive.
    to_text(admin, score)
    changed = time.monotonic()
    set_values(emu, {ids[2]: {SCORE: "O'Brien"}, ids[3]: {SCORE: "gold"}})
    stack.workload.run(changes=CHANGES, rate=RATE)
    followed_in(
        stack,
        lambda: column_type(stack, "Account", SCORE) == "string" and stack.rows("Account")[ids[2]][SCORE] == "O'Brien",
        "Account.Score__c Number -> Text (CDC)",
        since=changed,
    )
    # The same on a polled object: its next poll reads a value the column cannot hold.
    to_text(admin, rating)
    changed = time.monotonic()
    set_values(emu, {contacts[0]: {RATING: "five stars"}}, "Contact")
    stack.workload.run(changes=CHANGES, rate=RATE)
    followed_in(
        stack,
        lambda: stack.rows("Contact")[contacts[0]][RATING] == "five stars",
        "Contact.Rating__c Number -> Text (polled)",
        since=changed,
    )
    # A deleted field's name taken by a new field of another type: the column holds the new field's values only.
    add_field(admin, REGION, {"type": "Number", "label": "Region", "precision": 6, "scale": 1})
    changed = time.monotonic()
    grant_read(admin, permission_set, REGION)
    set_values(emu, {ids[0]: {REGION: 12.5}})
    stack.workload.run(changes=CHANGES, rate=RATE)
    followed_in(
        stack,
        lambda: (
            field_marks(replica(stack)).get(REGION, {}).get("status") == "recreated"
            and stack.rows("Account")[ids[0]][REGION] == 12.5
        ),
        "Account.Region__c deleted, created again Text -> Number",
        since=changed,
    )

    for name in stack.objects:
        assert differences(emu, name, stack.rows(name), limit=20) == [], name
    rows = stack.rows("Account")
    assert [rows[i][REGION] for i in ids] == [12.5, *[None] * (len(ids) - 1)]  # no old "R<n>" left
    assert [rows[i][SCORE] for i in ids[1:4]] == ["123456789.1234", "O'Brien", "gold"]
    assert stack.rows("Contact")[contacts[1]][RATING] == "11"
    marks = {k: v["status"] for k, v in field_marks(replica(stack)).items()}
    assert marks == {SCORE: "retyped", REGION: "recreated"} and marked_fields(replica(stack)) == {}
    assert field_marks(replica(stack, "Contact"))[RATING]["status"] == "retyped"
    with stack.instance() as instance:
        added = {f for meta in stack.materializations(instance, "Account") for f in meta.get("fields_added") or []}
        failed = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert {SCORE, REGION, TIER} <= added
    assert [r.dagster_run.run_id for r in failed] == [], "no run failed on the way"
