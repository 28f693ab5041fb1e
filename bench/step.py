"""The fixed cost of one replica step: what a step costs when it has little or nothing to do.

An org of N generated custom objects (`Thing_001__c` ..., 3 records each) in the emulator; the platform's real
Definitions and Dagster's `materialize()` in this process, with one warm Spark session (`local[2]`, the tests'
settings). Each run selects the N replicas (and, in a second run, their checks); per step, from the run's event
log and Spark's status store:

- **(c) initial load**: each replica's first run: a Bulk API 2.0 snapshot of its 3 records, then the fold of the
  org's build events (landed and ingested before) over it;
- **(a) idle**: nothing pending for any object;
- **(b) a few changes**: one update transaction in every object, ingested by a change_events run first;
- **checks**: the replicas' asset checks (as the daemon's runs include them), after (b) and after an idle run.

Printed per case: the mean and median wall of a step (STEP_START to STEP_SUCCESS), the Spark jobs started during
the steps (per step), and the run's wall. The baseline in the same process: one trivial Spark job
(`spark.range(1).collect()`), warm. With `--against <git ref>` the same measurement also runs on that ref's code
(a temporary `git worktree` of it, in a child process), so before and after come from one sitting.

    python -m bench.step [--objects 15] [--against main]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_SPARK_CONF = {  # tests/settings.py: local[2], as the tests run
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
RECORDS_PER_OBJECT = 3
WARM_OBJECTS = 5  # loaded first, unmeasured: a JVM's first queries compile and JIT


def _spark_jobs(spark) -> list[float]:
    """Submission times (epoch seconds) of every job Spark's status store still holds."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = []
    for i in range(jobs.size()):
        submitted = jobs.apply(i).submissionTime()
        if submitted.isDefined():
            out.append(submitted.get().getTime() / 1000)
    return out


class Bench:
    def __init__(self, root: Path, objects: int):
        import dagster as dg

        from definitions import build_defs
        from resources.salesforce import SalesforceResource
        from salesforce_emulator import Emulator
        from salesforce_emulator.custom_objects import custom_object_name
        from salesforce_emulator.workload import Workload

        self.dg = dg
        self.names = [custom_object_name(n) for n in range(1, objects + 1)]
        self.emu = Emulator(root / "org", landing_dir=root / "landing", custom_objects=objects, roll_seconds=3600)
        self.workload = Workload(self.emu, seed=9, custom_objects=objects, custom_records=RECORDS_PER_OBJECT)
        self.workload.build_org(accounts=3)
        self.emu.start()
        salesforce = SalesforceResource(
            instance_url=self.emu.instance_url, access_token=self.emu.token, ca_bundle=str(self.emu.ca_file)
        )
        config = root / "replication.yaml"
        config.write_text(
            json.dumps(
                {
                    "options": {"transaction_close_after": 0, "initial_load": True},
                    "objects": [{"name": n} for n in self.names],
                }
            )
        )
        self.defs = build_defs(
            config_path=config,
            landing_path=str(root / "landing"),
            warehouse_root=str(root / "warehouse"),
            spark_conf=TEST_SPARK_CONF,
            salesforce=salesforce,
        )
        self.instance = dg.DagsterInstance.ephemeral()
        self.assets = [a for a in self.defs.assets if isinstance(a, dg.AssetsDefinition)]

    def replicas(self, names: list[str]):
        return [self.dg.AssetKey(["salesforce", n]) for n in names]

    def run(self, keys, *, checks: bool = False) -> dict:
        """One materialize() of `keys` (with the replicas' checks if asked): per-step walls and Spark jobs."""
        from pyspark.sql import SparkSession

        dg = self.dg
        assets = [a for a in self.assets if set(a.keys) & set(keys)]
        if checks:
            assets += [c for c in self.defs.asset_checks or [] if any(k.asset_key in keys for k in c.check_keys)]
        started = time.perf_counter()
        result = dg.materialize(assets, resources=self.defs.resources, instance=self.instance, selection=keys)
        wall = time.perf_counter() - started
        assert result.success
        spans: dict[str, list[float]] = {}
        for entry in self.instance.all_logs(result.run_id):
            event = entry.dagster_event
            if event is not None and event.event_type_value in ("STEP_START", "STEP_SUCCESS"):
                spans.setdefault(event.step_key, []).append(entry.timestamp)
        spark = SparkSession.getActiveSession()
        submitted = _spark_jobs(spark) if spark is not None else []
        out = {}
        for kind, test in (
            ("replica", lambda k: k.startswith("salesforce__") and not k.endswith("_checks")),
            ("checks", lambda k: k.endswith("_checks")),
            ("change_events", lambda k: k == "change_events"),
        ):
            steps = {k: v for k, v in spans.items() if test(k) and len(v) == 2}
            if not steps:
                continue
            walls = [end - start for start, end in steps.values()]
            jobs = sum(1 for t in submitted for start, end in steps.values() if start <= t <= end)
            out[kind] = {
                "steps": len(steps),
                "mean_s": round(statistics.mean(walls), 3),
                "median_s": round(statistics.median(walls), 3),
                "max_s": round(max(walls), 3),
                "spark_jobs_per_step": round(jobs / len(steps), 2),
            }
        laps: dict[str, list[float]] = {}  # the apply step's own stopwatch (materialization metadata seconds_*)
        for event in result.get_asset_materialization_events():
            if event.materialization.asset_key.path[0] == "salesforce":
                for key, value in event.materialization.metadata.items():
                    if key.startswith("seconds_"):
                        laps.setdefault(key[len("seconds_") :], []).append(float(value.value))
        if laps and "replica" in out:
            out["replica"]["apply_laps_mean_s"] = {k: round(statistics.mean(v), 3) for k, v in laps.items()}
        return {"run_wall_s": round(wall, 2), **out}

    def trivial_job_s(self, repeat: int = 20) -> float:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        walls = []
        for _ in range(repeat):
            started = time.perf_counter()
            spark.range(1).collect()
            walls.append(time.perf_counter() - started)
        return round(statistics.median(walls), 4)

    def measure(self) -> dict:
        change_events = self.dg.AssetKey("change_events")
        self.emu.flush_cdc()  # the org's build events
        self.run([change_events])
        warm, rest = self.names[:WARM_OBJECTS], self.names[WARM_OBJECTS:]
        self.run(self.replicas(warm))  # warms the JVM (its first queries compile and JIT)
        out = {"objects": len(rest), "trivial_spark_job_s": self.trivial_job_s()}
        out["c_initial_load"] = self.run(self.replicas(rest))
        out["a_idle"] = self.run(self.replicas(rest))
        out["a_idle_with_checks"] = self.run(self.replicas(rest), checks=True)
        self.workload.touch_each(rest)
        self.emu.flush_cdc()
        out["b_change_events"] = self.run([change_events])
        out["b_changes"] = self.run(self.replicas(rest))
        self.workload.touch_each(rest)
        self.emu.flush_cdc()
        self.run([change_events])
        out["b_changes_with_checks"] = self.run(self.replicas(rest), checks=True)
        out["trivial_spark_job_s_after"] = self.trivial_job_s()
        return out

    def close(self) -> None:
        self.emu.stop()


def measure(objects: int) -> dict:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="bench-step-"))
    bench = Bench(root, objects)
    try:
        return bench.measure()
    finally:
        bench.close()
        shutil.rmtree(root, ignore_errors=True)


def against(ref: str, objects: int) -> dict:
    """The same measurement on `ref`'s code: a temporary worktree of it, this file run there in a child process."""
    tree = Path(tempfile.mkdtemp(prefix="bench-step-ref-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True
    )
    try:
        env = dict(os.environ, PYTHONPATH=str(tree))
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--objects", str(objects), "--json"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False, capture_output=True
        )


def _table(rows: dict[str, dict]) -> str:
    cases = [k for k in next(iter(rows.values())) if isinstance(next(iter(rows.values()))[k], dict)]
    lines = []
    for case in cases:
        for kind in ("replica", "checks", "change_events"):
            cells = []
            for label, row in rows.items():
                figures = row.get(case, {}).get(kind)
                if figures:
                    cells.append(
                        f"{label}: {figures['mean_s']:.3f} s mean / {figures['median_s']:.3f} median, "
                        f"{figures['spark_jobs_per_step']:g} jobs"
                    )
            if cells:
                lines.append(f"{case:24s} {kind:14s} " + " | ".join(cells))
        walls = " | ".join(f"{label}: {row[case]['run_wall_s']:.1f} s" for label, row in rows.items() if case in row)
        lines.append(f"{case:24s} {'run wall':14s} {walls}")
    for label, row in rows.items():
        lines.append(
            f"{label}: one trivial Spark job {row['trivial_spark_job_s']:.4f} s "
            f"(after: {row['trivial_spark_job_s_after']:.4f} s), {row['objects']} objects measured"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    count = int(args[args.index("--objects") + 1]) if "--objects" in args else 15
    if "--json" in args:  # a child of --against: one JSON line
        print(json.dumps(measure(count)), flush=True)
        sys.exit(0)
    load = os.getloadavg()
    results = {}
    if "--against" in args:
        ref = args[args.index("--against") + 1]
        results[ref] = against(ref, count)
    results["this"] = measure(count)
    print(json.dumps(results))
    print(_table(results))
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
