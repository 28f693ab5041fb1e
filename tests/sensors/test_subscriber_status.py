"""subscriber_status_sensor and the subscriber_stream_healthy check, over status files the subscriber writes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
from harness import write_config

from cdc_assets.landing_checks import CHECK_NAME, DEAD_LETTERS_CHECK
from cdc_assets.names import LANDING_ZONE
from cdc_subscriber.cli import main as cli_main
from cdc_subscriber.dead_letters import DeadLetterStore, letters_folder, salvage
from cdc_subscriber.position import topic_slug
from cdc_subscriber.status import StatusReporter
from definitions import build_defs
from sensors.subscriber_status import SENSOR_NAME
from shared.subscriber_state import DeadLetter, state_dir_for


@pytest.fixture
def defs(tmp_path, sample_dir, spark):  # Spark started first: on a busy machine the sensor's resources starting it
    # can take longer than STALE_AFTER_SECONDS, and the status written before would read as a stopped subscriber's
    config = write_config(
        tmp_path / "replication.yaml", sample_dir / "describe", ["Account"], subscriber_max_lag_seconds=60
    )
    return build_defs(config_path=config, landing_path=str(tmp_path / "landing"), warehouse_root=str(tmp_path / "w"))


def report(tmp_path, topic: str = "/data/ChangeEvents", **fields) -> Path:
    """A status file as the subscriber writes it (StatusReporter's file name and fields)."""
    reporter = StatusReporter(state_dir_for(tmp_path / "landing"), topic, topic_slug(topic))
    reporter.path.parent.mkdir(parents=True, exist_ok=True)
    reporter.path.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(reporter.status, **fields))))
    return reporter.path


def evaluate(defs) -> dg.SensorResult:
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(instance=instance, resources=defs.resources, definitions=defs)
    return defs.get_sensor_def(SENSOR_NAME)(context)


def events(result: dg.SensorResult) -> tuple[dg.AssetObservation, dg.AssetCheckEvaluation]:
    observation, check, letters = result.asset_events
    assert observation.asset_key == LANDING_ZONE and check.asset_key == LANDING_ZONE and check.check_name == CHECK_NAME
    assert letters.check_name == DEAD_LETTERS_CHECK
    return observation, check


def dead_letters_check(result: dg.SensorResult) -> dg.AssetCheckEvaluation:
    return result.asset_events[2]


def test_a_running_stream_is_observed_with_lag_and_throughput_and_passes(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=2.5, events_per_second=40.0, events_landed=1200, last_replay_id=77)
    observation, check = events(evaluate(defs))
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["lag_seconds"] == 2.5 and meta["events_per_second"] == 40.0 and meta["last_replay_id"] == 77
    assert meta["stream_state"] == "RUNNING" and check.passed


def test_a_failed_stream_fails_the_check_with_its_last_error(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=1.0)
    report(
        tmp_path,
        topic="/data/AccountChangeEvent",
        state="FAILED",
        last_error="UNAVAILABLE: connection reset",
        last_error_at="2026-01-01T00:00:00+00:00",
    )
    observation, check = events(evaluate(defs))
    assert not check.passed and "FAILED" in check.description and "connection reset" in check.description
    assert observation.metadata["stream_state"].value == "FAILED"


def test_lag_over_the_threshold_fails_the_check(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=61.0)
    _, check = events(evaluate(defs))
    assert not check.passed and "lag 61s is over 60s" in check.description


def test_a_subscriber_that_stopped_reporting_reads_as_failed(defs, tmp_path):
    report(
        tmp_path,
        state="RUNNING",
        lag_seconds=0.0,
        updated_at=(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat(),
    )
    _, check = events(evaluate(defs))
    assert not check.passed and "FAILED" in check.description


def test_no_subscriber_of_ours_is_skipped_and_the_check_passes(defs):
    assert evaluate(defs).skip_reason is not None
    check = next(c for c in defs.asset_checks if CHECK_NAME in {k.name for k in c.check_keys})
    result = dg.materialize(
        [check],
        resources=defs.resources,
        instance=dg.DagsterInstance.ephemeral(),
        selection=dg.AssetSelection.checks(check),
    )
    evaluations = result.get_asset_check_evaluations()
    assert {e.check_name for e in evaluations} == {CHECK_NAME, DEAD_LETTERS_CHECK}
    assert all(e.passed for e in evaluations)


def dead_letter(tmp_path, replay_id: bytes = b"\x5f\x0e\x2a\xcf") -> None:
    found = salvage(
        replay_id=replay_id,
        schema_id="poison-1",
        payload=b"\xff" * 8,
        schema_text=None,
        channel="/data/ChangeEvents",
        entities=("Account",),
    )
    DeadLetterStore(state_dir_for(tmp_path / "landing"), "/data/ChangeEvents").record(
        DeadLetter.of(
            "/data/ChangeEvents",
            replay_id,
            "poison-1",
            b"\xff" * 8,
            "schema poison-1 cannot be fetched: NOT_FOUND",
            found,
        )
    )


def test_dead_letters_fail_their_check_until_acknowledged(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=0.5, dead_letters=1, last_dead_letter="replay id 5f0e2acf: ...")
    dead_letter(tmp_path)
    result = evaluate(defs)
    observation, stream = events(result)
    letters = dead_letters_check(result)
    assert stream.passed, "the stream itself went on: it is healthy"
    assert not letters.passed and "5f0e2acf" in letters.description and "NOT_FOUND" in letters.description
    assert "GAP_OVERFLOW for Account" in letters.description and "dead-letters --ack" in letters.description
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["dead_letters"] == 1 and meta["dead_letters_unacknowledged"] == 1
    assert "NOT_FOUND" in meta["last_dead_letter"] and meta["streams"]["/data/ChangeEvents"]["dead_letters"] == 1

    assert cli_main(["--landing-dir", str(tmp_path / "landing"), "dead-letters", "--ack"]) == 0
    result = evaluate(defs)
    assert dead_letters_check(result).passed
    meta = {k: v.value for k, v in events(result)[0].metadata.items()}
    assert meta["dead_letters"] == 1 and meta["dead_letters_unacknowledged"] == 0

    dead_letter(tmp_path, b"\x01\x02")  # a new one after the acknowledgement fails the check again
    assert not dead_letters_check(evaluate(defs)).passed


def test_the_dead_letters_check_runs_on_demand(defs, tmp_path):
    dead_letter(tmp_path)
    check = next(c for c in defs.asset_checks if DEAD_LETTERS_CHECK in {k.name for k in c.check_keys})
    result = dg.materialize(
        [check],
        resources=defs.resources,
        instance=dg.DagsterInstance.ephemeral(),
        selection=dg.AssetSelection.checks(check),
    )
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not evaluations[DEAD_LETTERS_CHECK].passed and evaluations[CHECK_NAME].passed


def test_a_file_in_the_dead_letter_store_that_is_not_a_letter_fails_the_check_not_the_sensor(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=0.5)
    dead_letter(tmp_path)
    assert cli_main(["--landing-dir", str(tmp_path / "landing"), "dead-letters", "--ack"]) == 0
    bad = Path(letters_folder(state_dir_for(tmp_path / "landing"), "/data/ChangeEvents")) / "0102.json"
    bad.write_text('{"topic": "/data/ChangeEvents", "replay_id": "01')  # a copy cut short
    result = evaluate(defs)  # evaluates: nothing raised
    observation, stream = events(result)
    letters = dead_letters_check(result)
    assert stream.passed and not letters.passed
    assert str(bad) in letters.description and "remove" in letters.description
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["dead_letter_files_unreadable"] == 1 and meta["dead_letters_unacknowledged"] == 0
    bad.unlink()
    assert dead_letters_check(evaluate(defs)).passed


def test_text_from_the_stream_reaches_descriptions_and_metadata_escaped(defs, tmp_path):
    """An entity name, a reason and a last error written by a stream (or by anyone who can write its state) cannot
    start a line of their own in the check's description or the observation's text metadata."""
    forged = "\n2026-01-01 INFO forged"
    report(tmp_path, state="FAILED", last_error=f"boom{forged}", last_error_at="now")
    DeadLetterStore(state_dir_for(tmp_path / "landing"), "/data/ChangeEvents").record(
        DeadLetter(
            "/data/ChangeEvents", "0a", "schema-1", "", f"cannot decode{forged}", f"resync{forged}", f"Account{forged}"
        )
    )
    result = evaluate(defs)
    observation, stream = events(result)
    letters = dead_letters_check(result)
    texts = [
        stream.description,
        letters.description,
        observation.description,
        observation.metadata["last_error"].value,
        observation.metadata["last_dead_letter"].value,
    ]
    assert all("\\n2026-01-01 INFO forged" in t for t in texts[:2] + texts[3:])
    assert not [t for t in texts if t and "\n" in t]
