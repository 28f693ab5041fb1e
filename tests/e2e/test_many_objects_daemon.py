"""Dozens of polled custom objects beside the five CDC objects, under the real Dagster daemon: a poll cycle carries
every polled object due in a few runs (not a run each), and one object breaking mid-way (a field the platform
replicates deleted by the org's admin: its next poll names a field the org no longer has) stays its own trouble.
When the workload stops and the sensors settle, every replica equals the org."""

from __future__ import annotations

import time
from collections import Counter

import dagster as dg
import pytest
from deltalake import DeltaTable
from e2e_admin import add_field, admin_of, grant_read, set_values
from org_compare import differences

from cdc_assets.names import TAG_MODE
from replication.schemas import marked_fields
from salesforce_emulator.custom_objects import custom_object_name

pytestmark = pytest.mark.e2e

# What the many_objects_stack fixture makes (tests/e2e/conftest.py).
CUSTOM = 24  # polled custom objects
INTERVAL = 20  # seconds: their poll_interval, and the describe interval of BREAKS
BREAKS = custom_object_name(3)
FIELD = "Doomed__c"
CHANGES, RATE = 200, 20


def differing(stack) -> dict[str, list]:
    return {n: d for n in stack.objects if (d := differences(stack.emu, n, stack.rows(n), limit=5))}


def until_equal(stack, timeout_seconds: float = 600.0) -> float:
    """Seconds until the sensors settle with every replica equal to the org (a polled object's change shows only
    after its next window, which a settled instance does not wait for)."""
    started = time.monotonic()
    while True:
        stack.wait_settled(timeout_seconds=600)
        if not (left := differing(stack)):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_seconds:
            pytest.fail(f"replicas still differ from the org after {timeout_seconds:.0f} s: {left}")
        time.sleep(INTERVAL / 2)


def test_dozens_of_polled_objects_and_the_cdc_objects_under_the_daemon_one_breaking_mid_way(many_objects_stack):
    stack, emu = many_objects_stack, many_objects_stack.emu
    print(f"\ninitial load of {len(stack.objects)} replicas equal to the org in {until_equal(stack):.0f} s")

    admin = admin_of(emu)
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})
    doomed = add_field(admin, FIELD, {"type": "Text", "label": "Doomed", "length": 40}, BREAKS)
    grant_read(admin, permission_set, FIELD, BREAKS)
    records = emu.store.ids(BREAKS)
    set_values(emu, {r: {FIELD: f"kept {n}"} for n, r in enumerate(records)}, BREAKS)
    until_equal(stack)
    assert {stack.rows(BREAKS)[r][FIELD] for r in records} == {f"kept {n}" for n in range(len(records))}

    stack.workload.run(changes=CHANGES // 2, rate=RATE)
    admin.restful(f"tooling/sobjects/CustomField/{doomed}", method="DELETE")  # mid-way, while the workload runs
    stats = stack.workload.run(changes=CHANGES - CHANGES // 2, rate=RATE)
    stack.workload.touch_each([custom_object_name(n) for n in range(1, CUSTOM + 1)])  # every polled object changes
    print(f"workload: {stats}; replicas equal to the org {until_equal(stack):.0f} s after it stopped")

    rows = stack.rows(BREAKS)
    assert all(rows[r][FIELD] == f"kept {n}" for n, r in enumerate(records))  # a deleted field's column keeps them
    assert marked_fields(DeltaTable(str(stack.warehouse / BREAKS)))[FIELD]["status"] == "removed"
    with stack.instance() as instance:
        runs = [r.dagster_run for r in instance.get_run_records()]
    polls = [r for r in runs if r.tags.get(TAG_MODE) == "poll"]
    carried = Counter(len(r.asset_selection or ()) for r in polls)
    failed = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
    print(f"{len(runs)} runs; poll runs by objects carried: {dict(sorted(carried.items()))}; failed: {len(failed)}")
    # A cycle's objects ride together: the first poll (every initial load) was one run, and a run carries every
    # object of its window that changed, not one each.
    assert max(carried) == CUSTOM
    assert sum(n * k for n, k in carried.items()) / len(polls) > 1.5
