"""demo.latency's breakdown of a probe's time into phases, and the run timeline it reads from a real instance."""

from __future__ import annotations

import dagster as dg
import pytest

from demo.latency import PHASES, Probe, breakdown, table
from demo.run_timeline import RunTimeline, run_timeline


def test_phases_follow_the_run_and_add_up_to_the_probes_total():
    probe = Probe("001x", created_at=100.0, landed_at=101.0, visible_at=121.5, version=7)
    timeline = RunTimeline(
        run_id="r",
        created=106.0,
        tick=105.0,
        launched=107.0,
        process=109.0,
        run_start=111.0,
        steps={"change_events": (113.0, 116.0), "salesforce__Account": (116.5, 121.0)},
    )
    phases = breakdown(probe, timeline, commit_at=121.0)
    assert list(phases) == PHASES
    assert phases == {
        "org -> landed": 1.0,
        "landed -> tick": 4.0,
        "tick -> requested": 1.0,
        "requested -> launched": 1.0,
        "launched -> process": 2.0,
        "process -> run start": 2.0,
        "run start -> first step": 2.0,
        "ingest": 3.5,
        "Account step": 4.5,
        "seen": 0.5,
    }
    assert sum(phases.values()) == pytest.approx(probe.change_to_delta)


def test_a_phase_the_run_skipped_adds_to_the_next_one():
    probe = Probe("001x", created_at=100.0, landed_at=101.0, visible_at=111.0)
    timeline = RunTimeline(run_id="r", created=103.0, run_start=105.0, steps={"salesforce__Account": (106.0, 110.0)})
    phases = breakdown(probe, timeline, commit_at=110.0)
    assert phases["landed -> tick"] is None and phases["launched -> process"] is None
    assert phases["tick -> requested"] == 2.0 and phases["process -> run start"] == 2.0
    assert sum(v for v in phases.values() if v is not None) == pytest.approx(probe.change_to_delta)
    assert "| ingest | 0.0 |" in table([phases], [probe.change_to_delta])


def test_a_run_requested_before_the_file_landed_counts_only_what_was_left_of_it():
    probe = Probe("001x", created_at=100.0, landed_at=101.0, visible_at=108.0)
    timeline = RunTimeline(
        run_id="r",
        created=96.0,
        tick=95.5,
        launched=98.0,
        process=100.0,
        run_start=101.5,
        steps={"change_events": (102.0, 104.0), "salesforce__Account": (104.0, 107.8)},
    )
    phases = breakdown(probe, timeline, commit_at=107.8)
    assert phases["landed -> tick"] == phases["tick -> requested"] == phases["requested -> launched"] == 0
    assert phases["launched -> process"] == 0 and phases["process -> run start"] == 0.5
    assert sum(phases.values()) == pytest.approx(probe.change_to_delta)


@dg.asset
def small() -> int:
    return 1


@dg.asset
def Account(small: int) -> int:  # noqa: N802 (named like a replica's step)
    return small + 1


def test_run_timeline_reads_a_real_runs_steps_in_order():
    with dg.instance_for_test() as instance:
        result = dg.materialize([small, Account], instance=instance)
        timeline = run_timeline(instance, result.run_id)
    assert timeline.tick is None and timeline.launched is None  # executed in process: no sensor, no queue
    assert set(timeline.steps) == {"small", "Account"}
    assert timeline.created <= timeline.run_start <= timeline.first_step == timeline.steps["small"][0]
    start, end = timeline.steps["Account"]
    assert timeline.steps["small"][1] <= timeline.step_start("Account") == start <= end
