"""Steady state: the platform as the daemon runs it, one small batch of CDC events per run.

An org is built once (its events are the bootstrap run, reported apart), then `runs` batches of about 1,000 events
each are landed one at a time, each followed by one `materialize()` of change_events + the 5 replicas, all in one
process with one Spark session (as the in-process executor does under the daemon). A few runs with nothing new
landed give the intercept: the fixed cost of a run. Same run, same batches:

- **floor**: pyarrow reads the batch's lines (headers typed) and writes them as Parquet;
- **baseline**: one delta-rs merge per transaction into a growing table (catch-up's naive baseline), timed for
  up to 5 s per batch and extrapolated to the whole batch.

Batches are generated once (seeded) into `bench/out/steady-<runs>/batch-NNN/` and copied into the landing zone
between runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow.json as pajson
import pyarrow.parquet as pq

from bench.catchup import _LINE
from bench.common import PlatformRunner, figures, median, reset_peak_rss, start_spark, write_replication
from bench.naive import NaiveTable
from bench.workloads import OBJECTS, OUT
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


def run(*, runs: int = 100) -> list[dict]:
    root = batches(runs)
    events = json.loads((root / "done.json").read_text())["events"]
    reset_peak_rss()
    conf, spark_start = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-steady-"))
    landing, floor_dir = work / "landing", work / "floor"
    landing.mkdir()
    floor_dir.mkdir()
    config = write_replication(work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS})
    platform = PlatformRunner(config=config, landing=landing, warehouse=work / "wh", spark_conf=conf)
    naive = NaiveTable(work / "naive")
    walls, floors, naives, phases = [], [], [], []
    try:
        for batch in range(runs + 1):
            files = sorted((root / f"batch-{batch:03d}").glob("*.jsonl"))
            for f in files:
                shutil.copy2(f, landing / f.name)
            wall, phase, _ = platform.run()
            floor = floor_batch(files, floor_dir)
            applied, seconds = naive.apply(files, seconds=NAIVE_SECONDS)
            naive_s = seconds * events[batch] / max(applied, 1)
            if batch == 0:
                bootstrap = {"events": events[0], "wall_s": wall, "phases": phase}
                continue
            walls.append(wall), floors.append(floor), naives.append(naive_s), phases.append(phase)
        idle = [platform.run()[0] for _ in range(IDLE_RUNS)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_run = median(events[1:])
    phase_medians = {k: median([p.get(k, 0.0) for p in phases]) for k in sorted({k for p in phases for k in p})}
    return [figures(
        workload=f"steady state: {runs} runs of ~{EVENTS_PER_RUN:,} events (median run)", unit="events",
        count=int(per_run), wall_s=median(walls), floor_s=median(floors), baseline_s=median(naives),
        spark_start_s=spark_start, runs=runs, intercept_s=median(idle), idle_walls=idle,
        p90_s=sorted(walls)[int(0.9 * (len(walls) - 1))], max_s=max(walls), first_s=walls[0], last_s=walls[-1],
        total_events=sum(events[1:]), bootstrap=bootstrap, phases=phase_medians,
    )]
