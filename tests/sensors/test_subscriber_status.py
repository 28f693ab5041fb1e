"""subscriber_status_sensor and the subscriber_stream_healthy check, over status files the subscriber writes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from cdc_assets.assets import LANDING_ZONE
from definitions import build_defs
from cdc_subscriber.status import StatusReporter
from harness import write_config
from sensors.subscriber_status import CHECK_NAME, SENSOR_NAME


@pytest.fixture
def defs(tmp_path, sample_dir):
    config = write_config(tmp_path / "replication.yaml", sample_dir / "describe", ["Account"],
                          subscriber_max_lag_seconds=60)
    return build_defs(config_path=config, landing_path=str(tmp_path / "landing"), warehouse_root=str(tmp_path / "w"))


def report(tmp_path, topic: str = "/data/ChangeEvents", **fields) -> Path:
    """A status file as the subscriber writes it (StatusReporter's file name and fields)."""
    reporter = StatusReporter(tmp_path / "landing" / "_subscriber", topic, topic.strip("/").replace("/", "_"))
    reporter.path.parent.mkdir(parents=True, exist_ok=True)
    reporter.path.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(reporter.status, **fields))))
    return reporter.path


def evaluate(defs) -> dg.SensorResult:
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(instance=instance, resources=defs.resources, definitions=defs)
    return defs.get_sensor_def(SENSOR_NAME)(context)


def events(result: dg.SensorResult) -> tuple[dg.AssetObservation, dg.AssetCheckEvaluation]:
    observation, check = result.asset_events
    assert observation.asset_key == LANDING_ZONE and check.asset_key == LANDING_ZONE and check.check_name == CHECK_NAME
    return observation, check


def test_a_running_stream_is_observed_with_lag_and_throughput_and_passes(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=2.5, events_per_second=40.0, events_landed=1200, last_replay_id=77)
    observation, check = events(evaluate(defs))
    meta = {k: v.value for k, v in observation.metadata.items()}
    assert meta["lag_seconds"] == 2.5 and meta["events_per_second"] == 40.0 and meta["last_replay_id"] == 77
    assert meta["stream_state"] == "RUNNING" and check.passed


def test_a_failed_stream_fails_the_check_with_its_last_error(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=1.0)
    report(tmp_path, topic="/data/AccountChangeEvent", state="FAILED", last_error="UNAVAILABLE: connection reset",
           last_error_at="2026-01-01T00:00:00+00:00")
    observation, check = events(evaluate(defs))
    assert not check.passed and "FAILED" in check.description and "connection reset" in check.description
    assert observation.metadata["stream_state"].value == "FAILED"


def test_lag_over_the_threshold_fails_the_check(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=61.0)
    _, check = events(evaluate(defs))
    assert not check.passed and "lag 61s is over 60s" in check.description


def test_a_subscriber_that_stopped_reporting_reads_as_failed(defs, tmp_path):
    report(tmp_path, state="RUNNING", lag_seconds=0.0,
           updated_at=(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat())
    _, check = events(evaluate(defs))
    assert not check.passed and "FAILED" in check.description


def test_no_subscriber_of_ours_is_skipped_and_the_check_passes(defs):
    assert evaluate(defs).skip_reason is not None
    check = next(c for c in defs.asset_checks if CHECK_NAME in {k.name for k in c.check_keys})
    result = dg.materialize([check], resources=defs.resources, instance=dg.DagsterInstance.ephemeral(),
                            selection=dg.AssetSelection.checks(check))
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed
