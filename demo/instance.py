"""The Dagster instance the demo (and the end-to-end tests) run against: a DAGSTER_HOME with one dagster.yaml.

Runs are queued (QueuedRunCoordinator) and every concurrency pool defaults to one slot: each replica asset has its
own pool (`replica_<Name>`) and change_events has `change_events`, so two runs never write the same Delta table at
once, while different tables still proceed in parallel. At most two runs go at once (a 2-core machine runs one
Spark driver per run), and only one of them a landing run. A run that was in flight when the processes died
(SIGKILL, power cut) would otherwise stay STARTED for ever, keep its pool slot and, since the reconciliation
sensor waits for in-flight runs of an object, stall that object: `fail_orphaned_runs` clears them at start-up.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from sensors.landing_zone import TAG_FILES

IN_FLIGHT = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
             dg.DagsterRunStatus.CANCELING]


def instance_config(*, max_concurrent_runs: int = 2, dequeue_interval_seconds: int = 2) -> dict:
    return {
        "run_coordinator": {
            "module": "dagster._core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"dequeue_interval_seconds": dequeue_interval_seconds},
        },
        "concurrency": {
            "pools": {"default_limit": 1},
            # One landing run at a time (it ingests every pending file anyway); a reconcile or resync run may
            # go alongside it rather than wait behind queued landing runs.
            "runs": {"max_concurrent_runs": max_concurrent_runs,
                     "tag_concurrency_limits": [{"key": TAG_FILES, "limit": 1}]},
        },
        "telemetry": {"enabled": False},
    }


def write_dagster_home(home: Path, **options) -> Path:
    """Create `home` with its dagster.yaml (rewritten every time, so a changed setting takes effect)."""
    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(
        "# Written by demo/instance.py: queued runs, one slot per concurrency pool.\n"
        + yaml.safe_dump(instance_config(**options), sort_keys=False))
    return home


def open_instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(Path(home).resolve()))


def in_flight_runs(instance: dg.DagsterInstance, *, queued: bool = True) -> list[dg.DagsterRun]:
    statuses = IN_FLIGHT + ([dg.DagsterRunStatus.QUEUED] if queued else [])
    return list(instance.get_runs(filters=dg.RunsFilter(statuses=statuses)))


def fail_orphaned_runs(home: Path) -> int:
    """Mark runs left in flight by a previous, killed session as failed and free their pool slots."""
    if not (Path(home) / "history").exists():
        return 0
    with open_instance(home) as instance:
        orphans = in_flight_runs(instance, queued=False)
        for run in orphans:
            instance.report_run_failed(run, "the demo stopped while this run was in flight")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    return len(orphans)
