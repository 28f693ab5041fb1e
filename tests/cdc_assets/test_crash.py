"""A run that dies at any point, then a re-run, gives the same tables as a run that never died
(docs/design/contract.md §5).

Every named fault point (`shared.faults.FAULT_POINTS`) is hit by a SIGKILL in a real subprocess run: ingest and
apply points on the golden sample; reconcile and resync points (and apply's replay after them) against an emulator
org this process serves, over a warehouse with dirty records and a pending resync. The re-run happens here, and the
tables (and the replica checkpoints) must equal those of a clean run from the same starting state.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import crash_runner
import dagster as dg
import pytest
from crash_runner import run_mode
from deltalake import DeltaTable
from harness import Platform, comparable, load_lines
from settings import REPO, TEST_SPARK_CONF

from replication.apply import APPLY_APP
from replication.counts import dirty_count, row_count
from replication.state import ReplicaState
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from shared.faults import (
    APPLY_POINTS,
    CHANGEFEED_POINTS,
    DATA_POINTS,
    FAULT_POINTS,
    FORMULA_POINTS,
    HISTORY_POINTS,
    INGEST_POINTS,
    POLL_POINTS,
    RECONCILE_POINTS,
    RESYNC_POINTS,
)

OBJECTS = ["Account", "Contact", "Opportunity"]
TABLES = [*OBJECTS]
POINTS = ["ingest.after_quarantine", "ingest.after_commit", "replica.before_commit", "replica.after_commit"]
SAMPLE_KILL_POINTS = [*INGEST_POINTS, *APPLY_POINTS]
# (mode, point): the sync points, and apply's replay of the events since the overflow over the snapshot, in the
# resync's run (a reconcile folds its records' events itself: the apply after it has nothing left to write).
ORG_KILL_POINTS = [
    *(("reconcile", p) for p in RECONCILE_POINTS),
    *(("resync", p) for p in RESYNC_POINTS),
    ("resync", "replica.after_fold"),
    ("resync", "replica.after_commit"),
]
STATE_KEYS = ("resync_pending", "held", "last_commit_ts")


def snapshot(platform: Platform) -> dict:
    tables = {o: comparable(platform.rows(o)) for o in TABLES}
    events = sorted((e["event_key"], e["record_id"]) for e in platform.change_events())
    quarantine = sorted((q["source_file"], q["source_line"], q["reason"]) for q in platform.quarantine())
    return {"tables": tables, "events": events, "quarantine": quarantine}


def kill_run(spark, root: Path, point: str, describe: str, mode: str | None = None, env: dict | None = None) -> None:
    """One platform pass over OBJECTS in a subprocess, SIGKILLed at `point` (crash_runner.kill_run)."""
    crash_runner.kill_run(spark, root, point, describe, OBJECTS, mode, env)


def test_every_fault_point_is_named_once_and_killed_by_a_test():
    called = [
        m
        for package in ("replication", "cdc_assets")
        for path in (REPO / package).rglob("*.py")
        for m in re.findall(r'fault_point\("([^"]+)"\)', path.read_text())
    ]
    assert sorted(called) == sorted(FAULT_POINTS)
    data = [
        m
        for package in ("replication", "cdc_assets")
        for path in (REPO / package).rglob("*.py")
        for m in re.findall(r'data_fault_point\("([^"]+)",', path.read_text())
    ]
    assert sorted(data) == sorted(DATA_POINTS)  # raised by tests/cdc_assets/test_landing_faults.py and below
    assert len(set(FAULT_POINTS)) == len(FAULT_POINTS) >= 20
    # POLL_POINTS: killed by tests/cdc_assets/test_poll.py (a polled org of its own); CHANGEFEED_POINTS by
    # tests/cdc_assets/changefeed/test_changefeed.py; HISTORY_POINTS by tests/cdc_assets/history/test_history_crash.py;
    # FORMULA_POINTS by tests/cdc_assets/formulas/test_formulas_crash.py.
    assert set(SAMPLE_KILL_POINTS) | {p for _, p in ORG_KILL_POINTS} | set(POLL_POINTS) | set(CHANGEFEED_POINTS) | set(
        HISTORY_POINTS
    ) | set(FORMULA_POINTS) == set(FAULT_POINTS)


# -- the golden sample: ingest and apply ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_state(tmp_path_factory, spark, sample_dir):
    platform = Platform(tmp_path_factory.mktemp("clean"), sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    platform.run()
    return snapshot(platform)


@pytest.mark.parametrize("point", POINTS)
def test_injected_failure_then_rerun_equals_clean_run(point, tmp_path, spark, sample_dir, clean_state, monkeypatch):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    monkeypatch.setenv("CDC_FAULT_POINT", point)
    failed = platform.run(raise_on_error=False)
    assert not failed.success
    monkeypatch.delenv("CDC_FAULT_POINT")
    assert platform.run().success
    assert snapshot(platform) == clean_state


@pytest.mark.parametrize("point", SAMPLE_KILL_POINTS)
def test_sigkill_in_subprocess_then_rerun_equals_clean_run(point, tmp_path, spark, sample_dir, clean_state):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    kill_run(spark, tmp_path, point, str(sample_dir / "describe"))
    assert platform.run().success
    assert snapshot(platform) == clean_state


# -- a file that breaks ingest: its quarantine row, then its ledger commit -------------------------------------------

POISON = "poison-pill"  # CDC_FAULT_MARKER: the line holding it breaks ingest (shared/faults.py)
FIRST, KILLER, AFTER = "001000000000003AAA", "001000000000001AAA", "001000000000002AAA"


def poisoned_platform(root: Path, describe: Path) -> Platform:
    """A file whose line breaks ingest while CDC_FAULT_MARKER is set, and a good one after it (so the first commit
    a run reaches is the failed file's own)."""
    platform = Platform(root, describe, ["Account"], TEST_SPARK_CONF)
    platform.land(
        [event("Account", "CREATE", ["001000000000001AAA"], 1_763_800_000_000, tx="a", replay=1, Name=POISON)],
        name="a.jsonl",
    )
    platform.land(
        [event("Account", "CREATE", ["001000000000002AAA"], 1_763_800_001_000, tx="b", replay=2, Name="Good")],
        name="b.jsonl",
    )
    return platform


@pytest.fixture(scope="module")
def poisoned_clean_state(tmp_path_factory, spark, sample_dir):
    """The tables of a run of `poisoned_platform` never killed: the same for every kill point below."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CDC_FAULT_MARKER", POISON)
        clean = poisoned_platform(tmp_path_factory.mktemp("poisoned-clean"), sample_dir / "describe")
        assert clean.run(close_after=0).success
    expected = snapshot(clean)
    assert expected["quarantine"][0][:2] == ("a.jsonl", 0) and len(expected["events"]) == 1
    return expected


@pytest.mark.parametrize("point", ["ingest.after_quarantine", "ingest.before_commit", "ingest.after_commit"])
def test_sigkill_while_recording_a_failed_file_then_rerun_equals_clean_run(
    point, tmp_path, spark, sample_dir, monkeypatch, poisoned_clean_state
):
    """The failed file's own batch writes its quarantine row, then its ledger commit: killed between them (or just
    before or after the commit), the re-run fails the file again and ends with the tables of a run never killed."""
    monkeypatch.setenv("CDC_FAULT_MARKER", POISON)
    expected = poisoned_clean_state
    platform = poisoned_platform(tmp_path / "killed", sample_dir / "describe")
    crash_runner.kill_run(
        spark, platform.root, point, str(sample_dir / "describe"), ["Account"], env={"CDC_FAULT_MARKER": POISON}
    )
    assert platform.run(close_after=0).success
    assert snapshot(platform) == expected


def test_a_file_that_kills_the_run_process_three_times_is_set_aside_and_the_fourth_run_ingests_the_others(
    tmp_path, spark, sample_dir
):
    """No Python exception names the file (the process is killed: out of memory, a native reader's crash): the next
    run ingests the files the dead one held in halves, and a file runs died holding alone twice is set aside, while
    the file after it is ingested."""
    describe = str(sample_dir / "describe")
    platform = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF)
    # change_events exists before the file that kills lands (the first batch ever is not counted).
    platform.land([event("Account", "CREATE", [FIRST], 1_763_799_000_000, tx="c", replay=3, Name="First")])
    assert platform.run(close_after=0).success
    platform.land([event("Account", "CREATE", [KILLER], 1_763_800_000_000, tx="a", replay=1, Name=POISON)], "a.jsonl")
    platform.land([event("Account", "CREATE", [AFTER], 1_763_800_001_000, tx="b", replay=2, Name="Good")], "b.jsonl")
    kill = {"CDC_FAULT_MARKER": POISON, "CDC_FAULT_ACTION": "kill"}
    for _ in range(3):  # a.jsonl and b.jsonl together; then a.jsonl alone, twice
        crash_runner.kill_run(spark, platform.root, "", describe, ["Account"], env=kill)
    assert {e["record_id"] for e in platform.change_events()} == {FIRST}

    with pytest.MonkeyPatch.context() as patch:
        for name, value in kill.items():
            patch.setenv(name, value)
        result = platform.run(close_after=0, checks=True)  # it would die too, were the file not set aside

    assert result.success
    assert {e["record_id"] for e in platform.change_events()} == {FIRST, AFTER}
    [row] = platform.quarantine()
    assert (row["source_file"], row["source_line"], row["raw"]) == ("a.jsonl", 0, None)
    assert "the run process died 2 times ingesting it alone" in row["reason"], row["reason"]
    check = {
        e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("change_events")
    }["no_failed_landing_files"]
    assert not check.passed and "a.jsonl" in check.description


# -- an emulator org: reconcile and resync ----------------------------------------------------------------------------


def replica_state(platform: Platform) -> dict:
    """Each replica's checkpoint and the commit state a later run reads (no run ids or wall-clock times)."""
    out, warehouse = {}, DeltaWarehouse(root=str(platform.warehouse))
    for name in OBJECTS:
        table = DeltaTable(str(platform.warehouse / name))
        state = ReplicaState.read(warehouse, table).to_dict()
        out[name] = {
            "applied": table.transaction_version(APPLY_APP),
            "dirty_records": dirty_count(table),
            "row_count": row_count(table),
            **{k: state[k] for k in STATE_KEYS},
        }
    return out


def org_snapshot(platform: Platform) -> dict:
    return {"tables": {o: comparable(platform.rows(o)) for o in OBJECTS}, "state": replica_state(platform)}


@pytest.fixture(scope="module")
def org_world(tmp_path_factory, spark):
    """An org of 20 accounts served here, and a warehouse (`start`) left with dirty records and a pending resync
    by gap events and overflowed transactions; plus the tables a clean reconcile and a clean resync make of it."""
    base = tmp_path_factory.mktemp("org")
    start = base / "start"
    with Emulator(base / "org", landing_dir=start / "landing") as emu:
        workload = Workload(emu, seed=5, large_transaction=(25, 35))
        workload.build_org(accounts=20)
        platform = Platform(
            start,
            None,
            OBJECTS,
            TEST_SPARK_CONF,
            initial_load=True,
            salesforce=SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=emu.ca_file),
        )
        assert platform.run().success
        emu.set_faults(FaultConfig(gap_fraction=0.3, overflow_threshold=20, seed=1))
        workload.run(changes=60)
        for _ in range(6):  # each on a random object (Lead and Case are not replicated here)
            workload.large()
        workload.run(changes=60)
        emu.flush_cdc()
        assert platform.run(close_after=0).success
        state = replica_state(platform)
        assert any(s["dirty_records"] for s in state.values()), state
        assert any(s["resync_pending"] for s in state.values()), state
        env = {"SF_INSTANCE_URL": emu.instance_url, "SF_ACCESS_TOKEN": emu.token, "SF_CA_BUNDLE": emu.ca_file}
        before, clean = org_snapshot(platform), {}
        for mode in ("reconcile", "resync"):
            run = copy_platform(start, base / f"clean-{mode}", env)
            assert run_mode(run, mode).success
            clean[mode] = org_snapshot(run)
            assert clean[mode] != before, f"a {mode} run should change the tables"
        yield {"start": start, "env": env, "clean": clean, "emu": emu, "before": before}


def org_platform(root: Path, env: dict) -> Platform:
    """The platform over `root`, connected to the org named by `env` (the SF_* variables a subprocess gets)."""
    salesforce = SalesforceResource(
        instance_url=env["SF_INSTANCE_URL"],
        access_token=env["SF_ACCESS_TOKEN"],
        ca_bundle=env["SF_CA_BUNDLE"],
        retry_backoff_seconds=0.05,
    )
    return Platform(root, None, OBJECTS, TEST_SPARK_CONF, initial_load=True, salesforce=salesforce)


def copy_platform(start: Path, root: Path, env: dict) -> Platform:
    shutil.copytree(start, root)
    return org_platform(root, env)


@pytest.mark.parametrize(("mode", "point"), ORG_KILL_POINTS)
def test_sigkill_during_reconcile_or_resync_then_rerun_equals_clean_run(mode, point, tmp_path, spark, org_world):
    platform = copy_platform(org_world["start"], tmp_path / "p", org_world["env"])
    kill_run(spark, platform.root, point, "-", mode, org_world["env"])
    assert run_mode(platform, mode).success
    assert org_snapshot(platform) == org_world["clean"][mode]


def exhaust_budget_after(emu: Emulator, calls: int) -> None:
    emu.set_request_budget(daily_request_limit=emu.api_usage()["used"] + calls)


# What the org does to a run: (mode, fault, whether the run survives it). A failed run may have committed some
# replicas; the next run (the org healthy again) must still end equal to a clean run.
ORG_FAULTS = {
    "reconcile-500-throughout": ("reconcile", lambda emu: emu.fail_next_requests(100, 500), False),
    "reconcile-budget-runs-out": ("reconcile", lambda emu: exhaust_budget_after(emu, 3), False),
    "resync-budget-runs-out": ("resync", lambda emu: exhaust_budget_after(emu, 12), False),
    "resync-bulk-page-dropped": ("resync", lambda emu: emu.drop_next_responses(2, kind="bulk_results"), True),
    "resync-503-twice": ("resync", lambda emu: emu.fail_next_requests(2, 503), True),
}


@pytest.mark.parametrize("fault", ORG_FAULTS)
def test_org_faults_are_retried_or_fail_the_run_and_the_next_run_completes(fault, tmp_path, org_world):
    mode, inject, survives = ORG_FAULTS[fault]
    emu = org_world["emu"]
    platform = copy_platform(org_world["start"], tmp_path / "p", org_world["env"])
    inject(emu)
    try:
        assert run_mode(platform, mode).success == survives
    finally:
        emu.fail_next_requests(0)
        emu.clear_network_faults()
        emu.set_request_budget(daily_request_limit=1_000_000)
    if not survives:
        assert run_mode(platform, mode).success
    assert org_snapshot(platform) == org_world["clean"][mode]


def test_a_rejected_token_fails_the_run_before_anything_is_written(tmp_path, org_world):
    env = org_world["env"]
    platform = copy_platform(org_world["start"], tmp_path / "p", {**env, "SF_ACCESS_TOKEN": "expired-token"})
    assert not run_mode(platform, "resync").success  # 401 INVALID_SESSION_ID: not retried
    assert org_snapshot(platform) == org_world["before"]
    assert run_mode(org_platform(platform.root, env), "resync").success  # the token renewed
    assert org_snapshot(platform) == org_world["clean"]["resync"]
