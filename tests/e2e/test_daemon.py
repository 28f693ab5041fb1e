"""The platform under the real Dagster daemon: sensors decide, queued runs execute, replicas end equal to the org.

A workload of 20,000 transactions over the five objects lands with gap events, duplicate and late files and one
overflow, while `landing_zone_sensor` and `reconciliation_sensor` run in the daemon. Once they settle, every
replica equals the org record by record and field by field, and every replica materialization's counts add up.
Then one more change measures how long a landed file takes to become visible in Delta.
"""

from __future__ import annotations

import time
from collections import Counter

import dagster as dg
import pytest
from deltalake import DeltaTable
from org_compare import differences, live_rows

from demo.instance import STORAGES
from demo.latency import probe
from replication.apply import EVENT_COUNTS
from replication.changefeed.reader import replay
from salesforce_emulator import FaultConfig
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.workload_backends import Op

# On SQLite and on PostgreSQL (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("storage", STORAGES, indirect=True, scope="session")]

CHANGES = 20_000
FAULTS = FaultConfig(
    gap_fraction=0.01, duplicate_file_fraction=0.2, late_file_fraction=0.2, late_after_files=15, seed=7
)
OVERFLOW_RECORDS = 150
# A late file lands 15 files (~45 s at the stack's 3 s rolls) after it was due: by then the runs have ingested and
# applied newer changes of some of its records, so those events are late (with 2 files, ~6 s, a late file always
# landed before the next ingest and was ordered in with the newer ones: `late` stayed 0).
WARM_UP = 100
RATE = 150  # transactions per second: the workload spans minutes and dozens of files, so every file fault happens


def overflow_once(stack) -> None:
    """One transaction of more record changes than the (lowered) overflow threshold: one GAP_OVERFLOW."""
    stack.emu.set_faults(overflow_threshold=OVERFLOW_RECORDS - 50)
    contacts = stack.workload.live["Contact"][:OVERFLOW_RECORDS]
    stack.workload.backend.execute([Op("update", "Contact", rid, {"Title": "Buyer"}) for rid in contacts])
    stack.emu.set_faults(overflow_threshold=FaultConfig().overflow_threshold)


def failed_steps(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(run id, step) of every failed step in every failed run."""
    failed = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    return [
        (run.run_id[:8], e.dagster_event.step_key or "")
        for run in failed
        for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    ]


def test_daemon_sensors_keep_every_replica_equal_to_the_org(stack):
    # Every replica's initial load (a Bulk API snapshot) first: one taken after the overflow below would cover it,
    # and no resync would be needed. On a slow machine the first run starts only after the whole workload landed.
    warm = stack.workload.run(changes=WARM_UP)
    warm_up_seconds = stack.wait_settled(timeout_seconds=600)
    print(f"\ninitial load of {len(stack.objects)} replicas settled in {warm_up_seconds:.0f} s")

    started = time.monotonic()
    stack.emu.set_faults(FAULTS)
    stats = stack.workload.run(changes=CHANGES // 2, rate=RATE)
    overflow_once(stack)
    stats = stack.workload.run(changes=CHANGES - CHANGES // 2, rate=RATE)
    stack.emu.set_faults(FaultConfig())
    stack.emu.flush_cdc()  # the held-back (late) files land now, after newer ones were ingested
    workload_seconds = time.monotonic() - started
    stats = {k: v - warm.get(k, 0) for k, v in stats.items()}
    assert stats["record_changes"] >= CHANGES

    settle_seconds = stack.wait_settled(timeout_seconds=600)
    print(
        f"\nworkload: {stats['transactions']} transactions, {stats['record_changes']} record changes in "
        f"{workload_seconds:.0f} s; sensors settled {settle_seconds:.0f} s later"
    )

    landed = probe(simple_salesforce_client(stack.emu), stack.landing, stack.warehouse)
    print(
        f"landing -> Delta (quiet org, daemon): {landed.landing_to_delta:.1f} s "
        f"(change -> Delta {landed.change_to_delta:.1f} s)"
    )
    stack.wait_settled(timeout_seconds=120)

    for name in stack.objects:
        assert differences(stack.emu, name, stack.rows(name), limit=20) == [], name
        # The changefeed the daemon exported after every replica run, replayed, is the replica's live rows.
        records = [record for _, record in stack.feed(name).read()]
        assert replay(records) == live_rows(DeltaTable(str(stack.warehouse / name))), name
        print(f"{name} changefeed: {len(records)} records replay to the replica")

    with stack.instance() as instance:
        modes, faults = Counter(), Counter()
        for name in stack.objects:
            for meta in stack.materializations(instance, name):
                read = meta["events_read"]
                accounted = sum(meta[k] for k in EVENT_COUNTS if k != "events_read")
                assert read == accounted, f"{name}: {read} events read, {accounted} accounted for: {meta}"
                modes[meta["mode"]] += 1
                faults.update({k: meta[k] for k in ("gaps", "late", "overflow")})
        ingests = instance.fetch_materializations(dg.AssetKey("change_events"), limit=10_000).records
        faults["duplicates"] = sum(r.asset_materialization.metadata["duplicates"].value for r in ingests)
        runs = Counter(r.status.value for r in instance.get_runs())
        bad_steps = [s for s in failed_steps(instance) if not s[1].endswith("_checks")]
    print(f"runs: {dict(runs)}; replica materializations by mode: {dict(modes)}; {dict(faults)}")
    assert all(faults[k] for k in ("gaps", "late", "overflow", "duplicates")), "every fault should have happened"
    assert modes["reconcile"] and modes["resync"] and modes["initial_load"] == len(stack.objects)
    assert bad_steps == [], "only blocking checks (pending resync) may fail a run"
    assert time.monotonic() - started < 10 * 60
