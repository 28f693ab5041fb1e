"""Steady state: the platform as the daemon runs it, one small batch of CDC events per run, each run a new process.

An org is built once (its events are the bootstrap run, reported apart), then `runs` batches of about 1,000 events
each are landed one at a time, each followed by one `materialize()` of change_events + the 5 replicas in a **new
Python process**, as Dagster's run launcher does. Two ways to get Spark, one per workload name:

- `connect` (`make run`'s way): every run is a client of one long-lived Spark Connect server
  (`resources.spark_connect`) started before the bootstrap run, so runs share a warm JVM;
- `local`: every run starts its own local Spark JVM (the platform without a server).

A few runs with nothing new landed give the intercept: the fixed cost of a run. A run's wall is the whole child
process (Python and Dagster start, Spark session, the run). Same run, same batches:

- **floor**: pyarrow reads the batch's lines (headers typed) and writes them as Parquet;
- **baseline**: one delta-rs merge per transaction into a growing table (catch-up's naive baseline), timed for
  up to 5 s per batch and extrapolated to the whole batch.

Batches are generated once (seeded) into `bench/out/steady-<runs>/batch-NNN/` and copied into the landing zone
between runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.json as pajson
import pyarrow.parquet as pq

from bench.catchup import _LINE
from bench.common import (
    BENCH_SPARK,
    PlatformRunner,
    figures,
    median,
    peak_rss_mb,
    reset_peak_rss,
    start_spark,
    write_replication,
)
from bench.naive import NaiveTable
from bench.workloads import OBJECTS, OUT
from demo import processes
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload

EVENTS_PER_RUN = 1000
IDLE_RUNS = 3
NAIVE_SECONDS = 5.0  # the baseline is timed on each batch's first transactions, then extrapolated


def _lines(files: list[Path]) -> int:
    return sum(1 for f in files for _ in f.open())


def batches(runs: int, *, accounts: int = 1000, seed: int = 7) -> Path:
    """`batch-000` (the org being built) then `runs` batches of >= EVENTS_PER_RUN events, as landing files."""
    root = OUT / f"steady-{runs}"
    if (root / "done.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    staging = root / "staging"
    emu = Emulator(root / "org", landing_dir=staging, roll_seconds=3600)
    try:
        workload = Workload(emu, seed=seed)
        seen: set[Path] = set()

        def land(batch: int) -> int:
            """Copy the files published since the last call into `batch-NNN`; their event count."""
            new = [p for p in emu.flush_cdc() if p not in seen]
            seen.update(new)
            target = root / f"batch-{batch:03d}"
            target.mkdir(parents=True, exist_ok=True)
            for p in new:
                shutil.copy2(p, target / p.name)
            return _lines(new)

        workload.build_org(accounts=accounts)
        counts = [land(0)]
        for batch in range(1, runs + 1):
            events = 0
            while events < EVENTS_PER_RUN:
                workload.run(changes=60)
                events += land(batch)
            counts.append(events)
        for obj in OBJECTS:
            (root / "describe").mkdir(exist_ok=True)
            (root / "describe" / f"{obj}.json").write_text(json.dumps(emu.store.describe(obj)))
    finally:
        emu.stop()
    shutil.rmtree(staging, ignore_errors=True)
    (root / "done.json").write_text(json.dumps({"events": counts}))
    return root


def floor_batch(files: list[Path], out: Path) -> float:
    options = pajson.ParseOptions(explicit_schema=_LINE, unexpected_field_behavior="ignore")
    started = time.perf_counter()
    for f in files:
        pq.write_table(pajson.read_json(f, parse_options=options), out / f"{f.stem}.parquet")
    return time.perf_counter() - started


def one_run(config: Path, landing: Path, warehouse: Path) -> dict:
    """One `materialize()` in this process (the child side of `run`): its wall, phases and peak RSS (with its JVM)."""
    conf, spark_start = start_spark()
    wall, phases, _ = PlatformRunner(config=config, landing=landing, warehouse=warehouse, spark_conf=conf).run()
    return {"wall_s": wall, "spark_start_s": spark_start, "phases": phases, "peak_rss_mb": peak_rss_mb()}


def _run_in_new_process(work: Path, env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-m", "bench.steady", str(work)], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if child.returncode:
        raise RuntimeError(f"run failed ({child.returncode}):\n{child.stderr[-3000:]}")
    return wall, json.loads(child.stdout.strip().splitlines()[-1])


def run(*, runs: int = 100, spark: str = "connect") -> list[dict]:
    """`spark`: "connect" (runs share a Spark Connect server) or "local" (a local JVM per run)."""
    root = batches(runs)
    events = json.loads((root / "done.json").read_text())["events"]
    reset_peak_rss()
    work = Path(tempfile.mkdtemp(prefix="bench-steady-"))
    landing, floor_dir = work / "landing", work / "floor"
    landing.mkdir()
    floor_dir.mkdir()
    write_replication(work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS})
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    server = None
    naive = NaiveTable(work / "naive")
    walls, floors, naives, phases, children = [], [], [], [], []
    try:
        if spark == "connect":
            started = time.perf_counter()
            server, env["SPARK_REMOTE"] = processes.start_spark_connect(work / "spark_connect.log", conf=BENCH_SPARK)
            server_start = time.perf_counter() - started
        for batch in range(runs + 1):
            files = sorted((root / f"batch-{batch:03d}").glob("*.jsonl"))
            for f in files:
                shutil.copy2(f, landing / f.name)
            wall, child = _run_in_new_process(work, env)
            floor = floor_batch(files, floor_dir)
            applied, seconds = naive.apply(files, seconds=NAIVE_SECONDS)
            naive_s = seconds * events[batch] / max(applied, 1)
            if batch == 0:
                bootstrap = {"events": events[0], "wall_s": wall, "phases": child["phases"]}
                continue
            walls.append(wall), floors.append(floor), naives.append(naive_s), phases.append(child["phases"])
            children.append(child)
            print(
                f"  run {batch}: {events[batch]} events, {wall:.1f} s (in the run {child['wall_s']:.1f} s: "
                + ", ".join(f"{k} {v:.1f}" for k, v in sorted(child["phases"].items()))
                + ")",
                flush=True,
            )
        idle = [_run_in_new_process(work, env)[0] for _ in range(IDLE_RUNS)]
        server_peak = peak_rss_mb()
    finally:
        if server is not None:
            processes.stop(server)
        shutil.rmtree(work, ignore_errors=True)
    per_run = median(events[1:])
    phase_medians = {k: median([p.get(k, 0.0) for p in phases]) for k in sorted({k for p in phases for k in p})}
    return [
        figures(
            workload=f"steady state ({spark}): {runs} runs of ~{EVENTS_PER_RUN:,} events, a process each (median run)",
            unit="events",
            count=int(per_run),
            wall_s=median(walls),
            floor_s=median(floors),
            baseline_s=median(naives),
            runs=runs,
            intercept_s=median(idle),
            idle_walls=idle,
            p90_s=sorted(walls)[int(0.9 * (len(walls) - 1))],
            max_s=max(walls),
            first_s=walls[0],
            last_s=walls[-1],
            in_run_s=median([c["wall_s"] for c in children]),
            spark_start_s=median([c["spark_start_s"] for c in children]),
            server_start_s=server_start if server is not None else None,
            total_events=sum(events[1:]),
            bootstrap=bootstrap,
            phases=phase_medians,
        )
        | {"peak_rss_mb": server_peak + max(c["peak_rss_mb"] for c in children)}
    ]


if __name__ == "__main__":
    work = Path(sys.argv[1])
    print(json.dumps(one_run(work / "replication.yaml", work / "landing", work / "wh")))
