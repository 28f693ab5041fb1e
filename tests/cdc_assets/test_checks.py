"""Replica asset checks through Dagster's real materialize(): the golden sample, a corrupted table, no table yet."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from harness import Platform, load_lines, write_config
from settings import TEST_SPARK_CONF

from cdc_assets.checks import (
    BLOCKING,
    CHECKS,
    DELTA_VERSION,
    FRESHNESS,
    MAX_UNKNOWN_IDS,
    NO_PENDING_RESYNC,
    NO_STALE_DIRTY,
    QUARANTINE_EMPTY,
    REUSED_FROM,
    SCHEMA,
    UNIQUE_ID,
    build_replica_checks,
    check_freshness,
    check_no_stale_dirty,
    check_org_knows_ids,
    check_quarantine_empty,
)
from cdc_assets.names import replica_key
from replication.config import load_config
from replication.quarantine import acknowledge_quarantine
from replication.state import Reconciled, ReplicaState
from resources.delta import DeltaWarehouse

OBJECTS = ["Account", "Contact", "Opportunity"]


@pytest.fixture(scope="module")
def golden(tmp_path_factory, spark, sample_dir) -> tuple[Platform, dg.ExecuteInProcessResult]:
    """The basic sample, materialized once with the checks in the same run (the checks below share it)."""
    platform = Platform(tmp_path_factory.mktemp("checks"), sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    return platform, platform.run(checks=True, raise_on_error=False)


def run_checks(platform: Platform, checks=None, selection=None) -> dg.ExecuteInProcessResult:
    """Only checks, against the tables as they are (what "Execute checks" in the UI does)."""
    checks = list(platform.defs.asset_checks) if checks is None else checks
    return dg.materialize(
        platform.executable_assets() + checks,
        resources=platform.defs.resources,
        instance=platform.instance,
        selection=selection or dg.AssetSelection.all_asset_checks(),
        raise_on_error=False,
    )


def failed_steps(result: dg.ExecuteInProcessResult) -> list[str]:
    return [e.step_key for e in result.all_events if e.is_step_failure]


def meta(evaluation: dg.AssetCheckEvaluation) -> dict:
    return {k: v.value for k, v in evaluation.metadata.items()}


def warehouse(platform: Platform) -> DeltaWarehouse:
    return platform.defs.resources["warehouse"]


def test_golden_sample_checks_run_with_the_materialization(golden):
    platform, result = golden
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert {replica_key(o) for o in OBJECTS} <= materialized
    steps = [e.step_key for e in result.all_events if e.is_step_start]
    assert steps.index("salesforce__Account_checks") > steps.index("salesforce__Account")
    # Checks fail (pending resync, quarantine, stale dirty) but none of them blocks: schema and Id are sound.
    assert result.success and failed_steps(result) == []

    checks = {o: platform.check_results(result, o) for o in OBJECTS}
    for obj, results in checks.items():
        assert set(results) == set(CHECKS), obj
        assert {n for n, e in results.items() if e.blocking} == BLOCKING, obj
        assert results[SCHEMA].passed and results[UNIQUE_ID].passed, obj
        assert meta(results[SCHEMA])["rows_checked"] == len(platform.rows(obj)), obj  # first commit wrote all
        assert meta(results[UNIQUE_ID])["rows"] == len(platform.rows(obj)), obj

    assert checks["Account"][NO_PENDING_RESYNC].passed and checks["Contact"][NO_PENDING_RESYNC].passed
    resync = checks["Opportunity"][NO_PENDING_RESYNC]
    assert (
        not resync.passed
        and not resync.blocking
        and meta(resync)["resync_pending"].startswith("GAP_OVERFLOW at commit 2025-11-22T08:36:40")
    )
    assert "resync" in resync.description

    for obj in OBJECTS:
        quarantine = checks[obj][QUARANTINE_EMPTY]
        assert not quarantine.passed and not quarantine.blocking
        assert meta(quarantine)["unacknowledged_rows"] == 1
        assert meta(quarantine)["examples"] == ["events.jsonl:7: not a JSON object"]
        assert "acknowledge_quarantine" in quarantine.description

    stale = checks["Contact"][NO_STALE_DIRTY]  # the sample's gap dates from 2025: long past 15 minutes
    assert not stale.passed and meta(stale)["stale_records"] == 1 and meta(stale)["examples"] == ["003000000000001AAA"]
    assert meta(stale)["oldest_dirty_since"] == "2025-11-22T08:34:40+00:00"
    assert checks["Account"][NO_STALE_DIRTY].passed
    assert not checks["Account"][FRESHNESS].passed and meta(checks["Account"][FRESHNESS])["lag_seconds"] > 3600
    assert checks["Opportunity"][FRESHNESS].passed  # nothing applied yet: no lag to measure


def test_quarantine_passes_after_acknowledgement_up_to_the_newest_row(golden):
    platform, _ = golden
    newest = max(r["quarantined_at"] for r in platform.quarantine())
    with pytest.raises(ValueError, match="timezone-aware"):
        acknowledge_quarantine(warehouse(platform), newest.replace(tzinfo=None))

    acknowledge_quarantine(warehouse(platform), newest - timedelta(microseconds=1))
    assert not check_quarantine_empty(warehouse(platform)).passed

    acknowledge_quarantine(warehouse(platform), newest)
    result = run_checks(platform)
    for obj in OBJECTS:
        quarantine = platform.check_results(result, obj)[QUARANTINE_EMPTY]
        assert quarantine.passed, obj
        assert meta(quarantine)["acknowledged_until"] == newest.isoformat()
        assert meta(quarantine)["unacknowledged_rows"] == 0


def test_duplicate_id_fails_unique_id_and_bad_source_fails_schema(golden):
    platform, _ = golden
    rows = platform.table("Account")
    duplicate = dict(rows[0])  # same Id, written by the same commit: only unique_id can object
    stranger = dict(rows[1], Id="001000000000009AAA", _sf_source="bulk", _sf_synced_at=datetime.now(UTC))
    table = warehouse(platform).table("Account")
    write_deltalake(
        warehouse(platform).uri("Account"),
        pa.Table.from_pylist([duplicate, stranger], schema=pa.schema(table.schema().to_arrow())),
        mode="append",
    )

    result = run_checks(platform)
    assert "salesforce__Account_checks" in failed_steps(result)
    account = platform.check_results(result, "Account")
    assert not account[UNIQUE_ID].passed
    assert meta(account[UNIQUE_ID])["duplicate_ids"] == 1 and meta(account[UNIQUE_ID])["null_ids"] == 0
    assert meta(account[UNIQUE_ID])["examples"] == [duplicate["Id"]]
    assert not account[SCHEMA].passed
    assert [(f["column"], f["error"]) for f in meta(account[SCHEMA])["failures"]] == [("_sf_source", "DATAFRAME_CHECK")]
    assert platform.check_results(result, "Contact")[UNIQUE_ID].passed


def test_a_table_at_the_version_already_checked_is_not_read_again_and_a_new_version_is(tmp_path, sample_dir):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    first = platform.run(checks=True, raise_on_error=False)
    idle = platform.run(checks=True, raise_on_error=False)  # nothing landed since: a replica may still commit
    reused = []
    for obj in OBJECTS:
        before, after = platform.check_results(first, obj), platform.check_results(idle, obj)
        for name in (SCHEMA, UNIQUE_ID):
            assert before[name].passed and after[name].passed and REUSED_FROM not in meta(before[name]), (obj, name)
            unchanged = meta(after[name])[DELTA_VERSION] == meta(before[name])[DELTA_VERSION]
            assert meta(after[name]).get(REUSED_FROM) == (first.run_id if unchanged else None), (obj, name)
            if unchanged:
                assert {k: v for k, v in meta(after[name]).items() if k != REUSED_FROM} == meta(before[name])
                assert f"unchanged since run {first.run_id[:8]}" in after[name].description
                reused.append((obj, name))
    assert reused, "the idle run reused no check: nothing was tested"

    obj = reused[0][0]  # a writer bypassing the merge: a new version, read again (and failing)
    rows = platform.table(obj)
    table = warehouse(platform).table(obj)
    write_deltalake(
        warehouse(platform).uri(obj),
        pa.Table.from_pylist([dict(rows[0])], schema=pa.schema(table.schema().to_arrow())),
        mode="append",
    )
    again = platform.check_results(run_checks(platform), obj)
    assert not again[UNIQUE_ID].passed and REUSED_FROM not in meta(again[UNIQUE_ID])
    assert meta(again[UNIQUE_ID])["duplicate_ids"] == 1


def test_thresholds_come_from_replication_yaml(golden, tmp_path, sample_dir):
    platform, _ = golden
    lenient = load_config(
        write_config(
            tmp_path / "replication.yaml",
            sample_dir / "describe",
            OBJECTS,
            dirty_threshold_seconds=1e9,
            freshness_seconds=1e9,
        )
    )
    checks = [build_replica_checks(sobject=o, replication=lenient) for o in lenient.objects]
    only = dg.AssetSelection.checks(
        *[dg.AssetCheckKey(replica_key(o), n) for o in OBJECTS for n in (NO_STALE_DIRTY, FRESHNESS)]
    )
    result = run_checks(platform, checks, only)
    for obj in ("Account", "Contact"):
        results = platform.check_results(result, obj)
        assert set(results) == {NO_STALE_DIRTY, FRESHNESS} and all(e.passed for e in results.values()), obj
        assert meta(results[NO_STALE_DIRTY])["threshold_seconds"] == 1e9


def test_stale_dirty_and_freshness_thresholds_are_exclusive_bounds(golden):
    platform, _ = golden
    table = warehouse(platform).table("Contact")
    dirty_since = datetime(2025, 11, 22, 8, 34, 40, tzinfo=UTC)
    at = {s: dirty_since + timedelta(seconds=900 + s) for s in (-1, 1)}
    assert check_no_stale_dirty(warehouse(platform), table, "Contact", threshold=900, now=at[-1]).passed
    assert not check_no_stale_dirty(warehouse(platform), table, "Contact", threshold=900, now=at[1]).passed
    state = ReplicaState(last_commit_ts=dirty_since.isoformat())
    assert check_freshness(table, state, "Contact", threshold=900, now=at[-1]).passed
    assert not check_freshness(table, state, "Contact", threshold=900, now=at[1]).passed


def test_checks_pass_and_say_so_before_any_table_exists(tmp_path, sample_dir):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    result = run_checks(platform)
    assert result.success
    for obj in OBJECTS:
        results = platform.check_results(result, obj)
        assert set(results) == set(CHECKS) and all(e.passed for e in results.values()), obj
        for name in (SCHEMA, UNIQUE_ID, NO_STALE_DIRTY, QUARANTINE_EMPTY, FRESHNESS):
            assert "does not exist yet" in meta(results[name])["table"], (obj, name)


def test_the_schema_fingerprint_is_the_same_in_every_process(sample_dir):
    # Reuse across runs compares fingerprints made in different run workers: no per-process order may leak in.
    code = (
        "import json, sys; from cdc_assets.checks import schema_fingerprint; "
        "from object_schema.describe import ObjectSchema; "
        "print(schema_fingerprint(ObjectSchema.from_describe(json.load(open(sys.argv[1])))))"
    )
    prints = {
        subprocess.run(
            [sys.executable, "-c", code, str(sample_dir / "describe" / "Account.json")],
            env=os.environ | {"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(prints) == 1 and prints.pop().strip()


FORGED = "\n2026-01-01 INFO forged"


def test_landing_text_reaches_logs_and_check_metadata_escaped_and_values_unquoted(tmp_path, sample_dir, caplog):
    """A file name that starts a forged log line, and a value that does not fit its field: the logs and the check
    metadata name the file (escaped) and the field and its type, never the value; the quarantine keeps both."""
    from salesforce_emulator.landing_lines import event

    platform = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF)
    name = f"bad{FORGED}\u202e.jsonl"
    platform.land(
        [
            event("Account", "CREATE", ["001000000000001AAA"], 1763800000000, Name="Acme"),
            event("Account", "UPDATE", ["001000000000001AAA"], 1763800001000, NumberOfEmployees="john@example.com"),
            "not json" + FORGED,
        ],
        name=name,
    )
    with caplog.at_level(logging.INFO):
        result = platform.run(checks=True, close_after=0, raise_on_error=False)
    assert {q["reason"] for q in platform.quarantine()} == {
        "not a JSON object",
        "field NumberOfEmployees value 'john@example.com' is not a valid int",
    }
    assert {q["source_file"] for q in platform.quarantine()} == {name}  # the table keeps what landed

    logged = [r.getMessage() for r in caplog.records] + [
        e.user_message for e in platform.instance.all_logs(result.run_id)
    ]
    quarantine = meta(platform.check_results(result, "Account")[QUARANTINE_EMPTY])
    files = platform.materialization(result, "change_events")["files_ingested"]
    shown = [*logged, *quarantine["examples"], *files]
    assert any("bad\\n2026-01-01 INFO forged\\u202e.jsonl" in text for text in shown)  # it is there, escaped
    assert not [text for text in shown if FORGED in text or "\u202e" in text]
    assert not [text for text in shown if "john@example.com" in text]
    assert any("field NumberOfEmployees: its value is not a valid int" in e for e in quarantine["examples"])
    assert any("field NumberOfEmployees: its value is not a valid int" in text for text in logged)


def test_org_knows_ids_fails_for_a_refused_id_or_too_many_unknown_ones():
    """What the last reconcile took out of the dirty set without a record (replication/refetch.py), judged."""
    assert check_org_knows_ids(ReplicaState(), "Account").passed
    quiet = Reconciled(
        at="2026-01-01T00:00:00+00:00", records=40, unknown=MAX_UNKNOWN_IDS, unknown_examples=["001000000000009AAA"]
    )
    assert check_org_knows_ids(ReplicaState(reconciled=quiet), "Account").passed  # records hard-deleted meanwhile

    invented = replace(quiet, unknown=MAX_UNKNOWN_IDS + 1)
    result = check_org_knows_ids(ReplicaState(reconciled=invented), "Account")
    assert not result.passed and meta(result)["ids_unknown_to_org"] == MAX_UNKNOWN_IDS + 1
    assert (
        f"{MAX_UNKNOWN_IDS + 1} dirty ids are unknown to the org, more than {MAX_UNKNOWN_IDS} (e.g. "
        "001000000000009AAA)" in result.description
    )
    refused = replace(
        quiet, unknown=0, refused=1, refused_examples=["'001000000000001ZZZ': MALFORMED_ID: malformed id"]
    )
    result = check_org_knows_ids(ReplicaState(reconciled=refused), "Account")
    assert not result.passed and meta(result)["refused_examples"] == refused.refused_examples
    assert "refused 1 record ids as malformed ('001000000000001ZZZ'" in result.description
