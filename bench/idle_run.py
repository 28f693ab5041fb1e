"""The fixed cost of a run: a landing run with nothing to do, as a run worker runs it.

The 5-object platform (the catch-up workload's describe files) over a landing zone of one small file, a
DAGSTER_HOME instance (the repository's dagster.yaml: SQLite storage; bench/storage.py: PostgreSQL too) and a warm Spark Connect server, as `make run`
has them. The first run ingests and applies the file (not measured); each measured run then selects what a landing
run selects (change_events, each object's `events/<Object>_events` slice and replica, and their checks) with nothing
landed since: a fresh Python process (`dagster asset materialize`, which executes in process what a run worker
executes) from its spawn to its exit. Phases from the instance's records of the run:

- **start-up**: spawn -> run created (Python, `import dagster`, `import definitions`, the definitions built);
- **run creation**: the run and its planned materializations and checks written (SQLite) -> `RUN_START`;
- **resources**: `RUN_START` -> first `STEP_START` (the Spark Connect session);
- **steps**: first step -> `RUN_SUCCESS` (every step, checks included);
- **exit**: `RUN_SUCCESS` -> the process gone.

With them, the events the run stored in the instance, by type (planned materializations and check evaluations are
written at the run's creation; each check evaluation also stores a step output).

Baseline in the same sitting, interleaved: a fresh Python that imports Dagster and exits (what any run worker pays
before it knows our code). The daemon's queue adds its `dequeue_interval_seconds` (1 s, dagster.yaml) on top.

    python -m bench.idle_run [--times 5] [--baseline /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
from dagster import DagsterEventType

from bench.common import write_replication
from bench.workloads import OBJECTS, cdc_workload
from cdc_assets.names import ingest_keys, replica_key
from demo.instance import Storage, open_instance, write_dagster_home
from demo.processes import start_spark_connect, stop

REPO = Path(__file__).resolve().parent.parent
LISTS = ("slowest steps", "events stored")  # per-run lists, shown for the last run rather than as medians
FIRST_LINES = 300  # of the workload's first landing file: some of every object's creates


def _landing(root: Path, landing: Path, first_lines: int = FIRST_LINES) -> None:
    first = sorted((root / "landing").rglob("*.jsonl"))[0]
    landing.mkdir(parents=True)
    lines = first.read_text().splitlines()[:first_lines]
    (landing / "first.jsonl").write_text("\n".join(lines) + "\n")


def _selection() -> str:
    keys = [*ingest_keys(OBJECTS), *(replica_key(o) for o in OBJECTS)]
    return ",".join(k.to_user_string() for k in keys)


def _materialize(env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Spawn and exit (epoch seconds) of one `dagster asset materialize` of the landing run's selection."""
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "definitions", "--select", _selection()],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    exited = time.time()
    if done.returncode:
        raise RuntimeError(f"run failed:\n{done.stderr[-3000:]}")
    return spawned, exited


def _import_dagster(env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import dagster"], env=env, check=True)
    return time.perf_counter() - started


def _phases(instance: dg.DagsterInstance, spawned: float, exited: float) -> dict[str, float]:
    run = instance.get_runs(limit=1)[0]
    record = instance.get_run_record_by_id(run.run_id)
    events: dict[str, float] = {}
    steps: dict[str, float] = {}
    stored: Counter[str] = Counter()
    for e in instance.all_logs(run.run_id):
        kind = e.dagster_event.event_type if e.dagster_event else None
        stored[kind.name if kind else "log message"] += 1
        if kind in (DagsterEventType.RUN_START, DagsterEventType.STEP_START, DagsterEventType.RUN_SUCCESS):
            events.setdefault(kind.name, e.timestamp)  # the first of each
        if e.step_key and kind in (DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS):
            steps[e.step_key] = e.timestamp - steps.get(e.step_key, 0.0)
    created = record.create_timestamp.timestamp()
    return {
        "start-up": created - spawned,
        "run creation": events["RUN_START"] - created,
        "resources": events["STEP_START"] - events["RUN_START"],
        "steps": events["RUN_SUCCESS"] - events["STEP_START"],
        "exit": exited - events["RUN_SUCCESS"],
        "total": exited - spawned,
        "slowest steps": dict(sorted(steps.items(), key=lambda kv: -kv[1])[:4]),
        "events stored": dict(stored.most_common()),
    }


def _setup(
    work: Path,
    workload: Path,
    tree: Path,
    remote: str,
    storage: Storage = "sqlite",
    pg: Mapping[str, str] | None = None,
    first_lines: int = FIRST_LINES,
) -> dict[str, str]:
    """A landing zone, warehouse and DAGSTER_HOME (on `storage`; `pg`: the DAGSTER_PG_* values) under `work` for
    the code of `tree`; the run's environment."""
    _landing(workload, work / "landing", first_lines)
    config = write_replication(work / "replication.yaml", {o: workload / "describe" / f"{o}.json" for o in OBJECTS})
    home = write_dagster_home(work / "dagster_home", storage=storage, pg=pg)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDC_", "SF_", "DAGSTER_"))}
    return env | {
        "PYTHONPATH": str(tree),
        "DAGSTER_HOME": str(home),
        "SPARK_REMOTE": remote,
        "CDC_CONFIG": str(config),
        "CDC_LANDING_ZONE": str(work / "landing"),
        "CDC_WAREHOUSE": str(work / "warehouse"),
        "SF_INSTANCE_URL": "https://127.0.0.1:9",
        "SF_ACCESS_TOKEN": "unused",
    }


def run(times: int = 5, baseline: Path | None = None) -> dict:
    """`times` idle runs of this checkout (and of `baseline`'s, interleaved, against the same server)."""
    workload = cdc_workload("catchup-2500-40000", accounts=2500, changes=40000)
    work = Path(tempfile.mkdtemp(prefix="bench-idle-run-"))
    trees = {"this": REPO, **({"baseline": baseline.resolve()} if baseline else {})}
    server = None
    try:
        server, remote = start_spark_connect(work / "spark_connect.log")
        envs = {name: _setup(work / name, workload, tree, remote) for name, tree in trees.items()}
        for name, tree in trees.items():
            _materialize(envs[name], tree)  # ingests and applies the file, warms the server
        rows: dict[str, list[dict]] = {name: [] for name in trees}
        floor = []
        for _ in range(times):
            floor.append(_import_dagster(envs["this"]))
            for name, tree in trees.items():
                spawned, exited = _materialize(envs[name], tree)
                with open_instance(Path(envs[name]["DAGSTER_HOME"])) as instance:
                    rows[name].append(_phases(instance, spawned, exited))
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(work, ignore_errors=True)
    out = {"runs": times, "import_dagster_s": statistics.median(floor)}
    for name, measured in rows.items():
        medians = {k: statistics.median(r[k] for r in measured) for k in measured[0] if k not in LISTS}
        out[name] = {
            "median_s": medians,
            "x_import_dagster": medians["total"] / out["import_dagster_s"],
            "slowest steps (last run)": measured[-1]["slowest steps"],
            # Each event is a write to the instance (on SQLite its own connection and commit): most of the steps' time.
            "events stored (last run)": {"total": sum(measured[-1]["events stored"].values())}
            | measured[-1]["events stored"],
        }
    if baseline:
        out["x_baseline"] = out["this"]["median_s"]["total"] / out["baseline"]["median_s"]["total"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_run", description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. a worktree of main) measured beside")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print(json.dumps(run(args.times, args.baseline), indent=1))
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
