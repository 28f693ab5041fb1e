"""A run that dies at any point, then a re-run, gives the same tables as a run that never died (design §5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from settings import REPO, TEST_SPARK_CONF
from harness import Platform, comparable, load_lines

OBJECTS = ["Account", "Contact", "Opportunity"]
TABLES = [*OBJECTS]
POINTS = ["ingest.after_quarantine", "ingest.after_commit", "replica.before_commit", "replica.after_commit"]


def snapshot(platform: Platform) -> dict:
    tables = {o: comparable(platform.rows(o)) for o in TABLES}
    events = sorted((e["event_key"], e["record_id"]) for e in platform.change_events())
    quarantine = sorted((q["source_file"], q["source_line"], q["reason"]) for q in platform.quarantine())
    return {"tables": tables, "events": events, "quarantine": quarantine}


@pytest.fixture(scope="module")
def clean_state(tmp_path_factory, spark, sample_dir):
    platform = Platform(tmp_path_factory.mktemp("clean"), sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    platform.run()
    return snapshot(platform)


@pytest.mark.parametrize("point", POINTS)
def test_injected_failure_then_rerun_equals_clean_run(point, tmp_path, spark, sample_dir, clean_state,
                                                      monkeypatch):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    monkeypatch.setenv("CDC_FAULT_POINT", point)
    failed = platform.run(raise_on_error=False)
    assert not failed.success
    monkeypatch.delenv("CDC_FAULT_POINT")
    assert platform.run().success
    assert snapshot(platform) == clean_state


@pytest.mark.parametrize("point", ["ingest.after_commit", "replica.after_commit"])
def test_sigkill_in_subprocess_then_rerun_equals_clean_run(point, tmp_path, spark, sample_dir, clean_state):
    platform = Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    env = {**os.environ, "CDC_FAULT_POINT": point, "CDC_FAULT_ACTION": "kill"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "crash_runner.py"), str(tmp_path), str(sample_dir / "describe"),
         ",".join(OBJECTS)], env=env, cwd=REPO, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert platform.run().success
    assert snapshot(platform) == clean_state
