"""The cost of history tables (`history: true`): the same workloads with and without, in the same process.

- **catch-up**: one run over a CDC backlog (bench/workloads.py `cdc_workload`), the 5 objects;
- **steady**: a bootstrap run, then `runs` runs of about 1,000 events each (bench/steady.py's batches), each one
  `materialize()` in this process (the runs share one Spark session: what is measured is the run's work, not a
  JVM start).

Each workload runs twice over a fresh warehouse, without history (the baseline) then with it, after a warm-up pass
of the catch-up; `x_history` = the wall with history / the wall without (steady: of the median runs). Phases `apply.history` (deriving the versions in the apply step) come from
the replicas' metadata; the landing of the versions (the history's merge) is in the rest of the run's wall.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from deltalake import DeltaTable

from bench.common import PlatformRunner, figures, median, start_spark, write_replication
from bench.steady import batches
from bench.workloads import OBJECTS, cdc_workload


def _catchup(root: Path, work: Path, conf: dict, history: bool) -> tuple[float, dict, int]:
    config = write_replication(
        work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS}, history=history
    )
    wall, phases, _metadata = PlatformRunner(
        config=config, landing=root / "landing", warehouse=work / "wh", spark_conf=conf
    ).run()
    versions = sum(DeltaTable(str(work / "wh" / f"{o}__history")).count() for o in OBJECTS) if history else 0
    return wall, phases, versions


def _steady(root: Path, work: Path, conf: dict, history: bool, runs: int) -> tuple[float, list[float], int]:
    config = write_replication(
        work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS}, history=history
    )
    landing = work / "landing"
    landing.mkdir(parents=True)
    runner = PlatformRunner(config=config, landing=landing, warehouse=work / "wh", spark_conf=conf)
    walls = []
    for batch in range(runs + 1):
        for f in sorted((root / f"batch-{batch:03d}").glob("*.jsonl")):
            shutil.copy2(f, landing / f"{batch:03d}-{f.name}")
        wall, _, _ = runner.run()
        walls.append(wall)
    versions = sum(DeltaTable(str(work / "wh" / f"{o}__history")).count() for o in OBJECTS) if history else 0
    return walls[0], walls[1:], versions


def run(*, accounts: int = 2_000, changes: int = 60_000, runs: int = 20) -> list[dict]:
    conf, _ = start_spark()
    rows = []
    backlog = cdc_workload(f"catchup-{accounts}-{changes}", accounts=accounts, changes=changes)
    result = {}
    for history in (None, False, True):  # None: a warm-up pass (a cold JVM would handicap whichever runs first)
        work = Path(tempfile.mkdtemp(prefix="bench-history-"))
        try:
            result[history] = _catchup(backlog, work, conf, bool(history))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (plain, _, _), (with_history, phases, versions) = result[False], result[True]
    rows.append(
        figures(
            workload=f"catch-up with history ({accounts:,} accounts + {changes:,} changes)",
            unit="versions",
            count=versions,
            wall_s=with_history,
            baseline_s=plain,
            wall_without_s=plain,
            x_history=with_history / plain,
            apply_history_s=phases.get("apply.history", 0.0),
        )
    )
    steady_root = batches(runs)
    result = {}
    for history in (False, True):
        work = Path(tempfile.mkdtemp(prefix="bench-history-steady-"))
        try:
            result[history] = _steady(steady_root, work, conf, history, runs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (boot0, plain_runs, _), (boot1, history_runs, versions) = result[False], result[True]
    rows.append(
        figures(
            workload=f"steady with history ({runs} runs of ~1,000 events, in-process)",
            unit="versions",
            count=versions,
            wall_s=sum(history_runs),
            baseline_s=sum(plain_runs),
            median_run_s=median(history_runs),
            median_run_without_s=median(plain_runs),
            x_history=median(history_runs) / median(plain_runs),
            bootstrap_s=boot1,
            bootstrap_without_s=boot0,
            x_history_bootstrap=boot1 / boot0,
        )
    )
    return rows
