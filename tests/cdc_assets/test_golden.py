"""The basic sample stream through Dagster's real materialize(), compared row by row with its expected state."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from harness import Platform, load_lines
from settings import TEST_SPARK_CONF

OBJECTS = ["Account", "Contact", "Opportunity"]


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    # The sample's newest transaction stays open however slow the machine (an hour, as samples/basic.replication.yaml
    # has it): with the default minute, a run slower than that between ingest and apply would close it by timeout.
    return Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF, close_after=3600)


def _as_expected(value, expected):
    """Normalise a Delta value to the sample's JSON notation (timestamps as ISO strings with ms and Z)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return value


def test_sample_stream_produces_expected_state(platform, sample_dir):
    expected = json.loads((sample_dir / "expected_after_first_pass.json").read_text())
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    result = platform.run()
    assert result.success

    for obj in ("Account", "Contact"):
        rows = platform.rows(obj)
        assert set(rows) == {r["Id"] for r in expected[obj]}, obj
        for want in expected[obj]:
            got = rows[want["Id"]]
            for column, value in want.items():
                assert _as_expected(got[column], value) == value, f"{obj} {want['Id']} {column}"
    assert platform.rows("Opportunity") == {}

    ce = platform.materialization(result, "change_events")
    assert ce["duplicates"] == expected["_pending"]["duplicates_ignored"] == 1
    assert ce["lines_quarantined"] == len(expected["_pending"]["quarantined_lines"]) == 1
    assert [q["source_line"] for q in platform.quarantine()] == expected["_pending"]["quarantined_lines"]
    assert platform.quarantine()[0]["reason"] == "not a JSON object"
    assert ce["lines_read"] == 16 and ce["events_parsed"] == ce["ingested"] + ce["duplicates"]

    account = platform.materialization(result, "Account")
    assert account["held"] == 1 and account["held_transactions"] == ["0001a1b2-0000-4000-8000-000000000012"]
    contact = platform.materialization(result, "Contact")
    assert contact["dirty_records"] == 1 and contact["dirty_skipped"] == 1 and contact["gaps"] == 1
    opportunity = platform.materialization(result, "Opportunity")
    assert opportunity["resync_pending"].startswith("GAP_OVERFLOW at commit 2025-11-22T08:36:40")

    # Every ingested event is accounted for by exactly one replica counter.
    parts = ("applied", "gaps", "late", "superseded", "dirty_skipped", "held", "overflow")
    per_object = [platform.materialization(result, o) for o in OBJECTS]
    assert all(m["events_read"] == sum(m[p] for p in parts) for m in per_object)
    assert sum(m["events_read"] for m in per_object) == ce["ingested"] - ce["ignored"]
