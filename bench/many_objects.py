"""Hundreds of objects: one replication.yaml of N generated custom objects (`Thing_001__c` ..., the emulator's
`custom_objects`), each with a few records, replicated by the real sensors and `materialize()` in this process.

Figures, per N (and for a baseline of a few objects in the same run):
- **definitions load**: `build_defs` for the N objects (in this process, after imports), and a fresh process
  importing `definitions` as a code server does (imports included);
- **sensor ticks**: each sensor evaluated once (`build_sensor_context`) before the initial load, after it, and
  with a landed burst pending;
- **initial load**: the one run the reconciliation sensor asks for every object (wall);
- **burst**: one change in every object, landed, then the runs the sensors ask for until nothing is left (count,
  wall; with `--checks` each run includes its replicas' asset checks, as the daemon's runs do);
- **one object**: one change in one object; the run the landing sensor asks for (its replicas, its wall) must not
  grow with N;
- **memory** of `dagster-daemon run` and of the code server it starts (`dagster api grpc`) after they have loaded
  the N-object location and ticked the sensors for a while (RSS of each process).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import dagster as dg
import yaml
from deltalake import write_deltalake

from bench.common import process_tree, start_spark
from definitions import build_defs
from demo import processes
from demo.instance import open_instance, write_dagster_home
from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.custom_objects import custom_object_name
from salesforce_emulator.workload import Workload
from sensors.landing_zone import SENSOR_NAME as LANDING_SENSOR
from sensors.reconciliation import SENSOR_NAME as RECONCILIATION_SENSOR

warnings.filterwarnings("ignore", message=".*get_sensor_def will return.*")
RECORDS_PER_OBJECT = 3
DAEMON_SECONDS = 90.0


def write_config(path: Path, names: list[str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {"options": {"transaction_close_after": 0, "initial_load": True}, "objects": [{"name": n} for n in names]}
        )
    )
    return path


class Org:
    """The emulator with N custom objects, a landing zone, a warehouse and the platform's definitions over them."""

    def __init__(self, root: Path, objects: int, spark_conf: dict[str, str], *, checks: bool = False):
        self.root, self.objects, self.checks = root, objects, checks
        self.names = [custom_object_name(n) for n in range(1, objects + 1)]
        self.emu = Emulator(root / "org", landing_dir=root / "landing", custom_objects=objects, roll_seconds=3600)
        self.workload = Workload(self.emu, seed=5, custom_objects=objects, custom_records=RECORDS_PER_OBJECT)
        self.workload.build_org(accounts=10)
        self.emu.flush_cdc()
        self.emu.start()
        self.salesforce = SalesforceResource(
            instance_url=self.emu.instance_url, access_token=self.emu.token, ca_bundle=str(self.emu.ca_file)
        )
        self.config = write_config(root / "replication.yaml", self.names)
        started = time.perf_counter()
        self.defs = build_defs(
            config_path=self.config,
            landing_path=str(root / "landing"),
            warehouse_root=str(root / "warehouse"),
            spark_conf=spark_conf,
            salesforce=self.salesforce,
        )
        self.build_s = time.perf_counter() - started
        self.instance = dg.DagsterInstance.ephemeral()
        self.assets = [a for a in self.defs.assets if isinstance(a, dg.AssetsDefinition)]
        self.landed: set[Path] = set(self.emu.flush_cdc())  # the org's build lands before replication starts

    def tick(self, name: str) -> tuple[float, list[dg.RunRequest]]:
        context = dg.build_sensor_context(instance=self.instance, resources=self.defs.resources, definitions=self.defs)
        started = time.perf_counter()
        result = self.defs.get_sensor_def(name)(context)
        return time.perf_counter() - started, list(getattr(result, "run_requests", None) or [])

    def ticks(self) -> dict[str, float]:
        return {s.name: round(self.tick(s.name)[0], 3) for s in self.defs.sensors}

    def execute(self, request: dg.RunRequest) -> float:
        assets = [a for a in self.assets if set(a.keys) & set(request.asset_selection)]
        if self.checks:  # as the daemon's runs include them
            selected = set(request.asset_selection)
            assets += [c for c in self.defs.asset_checks or [] if {k.asset_key for k in c.check_keys} & selected]
        started = time.perf_counter()
        result = dg.materialize(
            assets,
            resources=self.defs.resources,
            instance=self.instance,
            run_config=request.run_config,
            tags=request.tags,
            selection=request.asset_selection,
            raise_on_error=False,
        )
        if not result.success:
            raise RuntimeError(f"the run {request.tags} failed")
        return time.perf_counter() - started

    def land(self) -> None:
        """Make the emulator's pending events visible (only files not seen before count as new)."""
        self.landed |= set(self.emu.flush_cdc())

    def settle(self, *, limit: int = 20) -> tuple[int, float, list[int]]:
        """Run what the landing and reconciliation sensors ask for until neither asks: (runs, wall, replicas per
        run)."""
        runs, wall, sizes = 0, 0.0, []
        for _ in range(limit):
            requests = [r for sensor in (LANDING_SENSOR, RECONCILIATION_SENSOR) for r in self.tick(sensor)[1]]
            if not requests:
                return runs, wall, sizes
            for request in requests:
                wall += self.execute(request)
                runs += 1
                sizes.append(sum(1 for k in request.asset_selection if k.path[0] == "salesforce"))
        raise RuntimeError(f"the sensors still ask for runs after {limit} rounds")

    def close(self) -> None:
        self.emu.stop()


def import_seconds(config: Path, env: dict[str, str]) -> float:
    """Wall of a fresh process importing `definitions` (what a code server does at start), imports included."""
    code = "import time; t = time.perf_counter(); import definitions; print(time.perf_counter() - t)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env | {"CDC_CONFIG": str(config)},
        cwd=processes.REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def process_rss(pid: int) -> dict[int, tuple[str, float]]:
    """Each process of `pid` and those under it, by pid: what it is and its RSS in MB. What it is: `daemon`
    (`dagster-daemon`), `code_server` (`dagster api grpc`), `run_worker` (`dagster api execute_run`, or the code
    server's multiprocessing child), `spark_jvm` (a run's local Spark driver, a Spark Connect server), `other`."""
    out = {}
    for p, status in process_tree(pid).items():
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        label = (
            "code_server"
            if " api grpc" in cmd
            else "daemon"
            if "dagster-daemon" in cmd
            else "run_worker"
            if " api execute_run" in cmd or "spawn_main" in cmd
            else "spark_jvm"
            if "/java " in cmd
            else "other"
        )
        out[int(p)] = (label, int(status.get("VmRSS", "0 kB").split()[0]) / 1024)
    return out


def process_rss_mb(pid: int) -> dict[str, float]:
    """RSS (MB) of `pid` and each process under it, summed by what it is (`process_rss`)."""
    out: dict[str, float] = {}
    for label, mb in process_rss(pid).values():
        out[label] = out.get(label, 0.0) + mb
    return out


def daemon_memory(org: Org, seconds: float = DAEMON_SECONDS) -> dict[str, float]:
    """`dagster-daemon run` over the N-object location with the sensors on, for `seconds`: RSS of the daemon and
    the code server (peak of samples every 5 s). Runs it queues are left queued: no run coordinator runs them
    (max_concurrent_runs 0), so the figure is the daemon and code server alone."""
    home = write_dagster_home(org.root / "dagster_home", max_concurrent_runs=0)
    with open_instance(home):
        pass
    env = processes.platform_env(
        home=home, config=org.config, landing=org.root / "landing", warehouse=org.root / "warehouse", emu=org.emu
    )
    process = processes.start(
        ["dagster-daemon", "run", "-w", str(processes.REPO / "workspace.yaml")], env, log_file=org.root / "daemon.log"
    )
    peak: dict[str, float] = {}
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(5)
            for label, mb in process_rss_mb(process.pid).items():
                peak[label] = max(peak.get(label, 0.0), mb)
    finally:
        processes.stop(process)
    return {k: round(v, 1) for k, v in peak.items()}


def measure(
    objects: int,
    spark_conf: dict[str, str],
    *,
    daemon: bool,
    with_runs: bool = True,
    checks: bool = False,
    daemon_seconds: float = DAEMON_SECONDS,
) -> dict:
    """The figures for `objects` objects; without `with_runs`, only those that need no run (definitions, the first
    sensor ticks, the daemon's and code server's memory over `daemon_seconds`: at a thousand objects the code
    server takes minutes to serve the location); with `checks`, each run includes its replicas' checks."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-objects-{objects}-"))
    org = Org(root, objects, spark_conf, checks=checks)
    try:
        out: dict = {"objects": objects, "build_defs_s": round(org.build_s, 2)}
        out["ticks_before_s"] = org.ticks()
        if not with_runs:  # tables without runs: each replica created empty, as after an initial load of nothing
            for name in org.names:
                schema = ObjectSchema.from_describe(org.emu.store.describe(name)).arrow_schema()
                write_deltalake(str(root / "warehouse" / name), schema.empty_table(), partition_by=[BUCKET_COLUMN])
            out["ticks_tables_no_runs_s"] = org.ticks()
            print(json.dumps(out), flush=True)  # what no subprocess is needed for, before the slower part
            return out | _processes(org, root, daemon=daemon, daemon_seconds=daemon_seconds)
        runs, wall, sizes = org.settle()
        out["initial_load"] = {"runs": runs, "wall_s": round(wall, 1), "replicas_per_run": sizes}
        out["ticks_idle_s"] = org.ticks()
        org.workload.touch_each(org.names)
        org.land()
        out["ticks_burst_pending_s"] = org.ticks()
        runs, wall, sizes = org.settle()
        out["burst"] = {"changes": objects, "runs": runs, "wall_s": round(wall, 1), "replicas_per_run": sizes}
        org.workload.touch_each(org.names[:1])
        org.land()
        runs, wall, sizes = org.settle()
        out["one_object"] = {"runs": runs, "wall_s": round(wall, 2), "replicas_per_run": sizes}
        return out | _processes(org, root, daemon=daemon, daemon_seconds=daemon_seconds)
    finally:
        org.close()
        shutil.rmtree(root, ignore_errors=True)


def _processes(org: Org, root: Path, *, daemon: bool, daemon_seconds: float = DAEMON_SECONDS) -> dict:
    env = processes.platform_env(
        home=root / "dagster_home",
        config=org.config,
        landing=root / "landing",
        warehouse=root / "warehouse",
        emu=org.emu,
    )
    out = {
        "import_definitions_s": round(import_seconds(org.config, env), 2),
        "import_definitions_one_object_s": round(
            import_seconds(write_config(root / "one.yaml", org.names[:1]), env), 2
        ),
    }
    if daemon:
        out["daemon_rss_mb"] = daemon_memory(org, daemon_seconds)
    return out


def run(*, sizes: tuple[int, ...] = (5, 200, 300), daemon: bool = True) -> list[dict]:
    conf, _ = start_spark()
    return [measure(n, conf, daemon=daemon) for n in sizes]


if (
    __name__ == "__main__"
):  # python -m bench.many_objects [N ...] [--no-daemon] [--no-runs] [--checks] [--daemon-seconds S]: a JSON line per N
    conf, _ = start_spark()
    seconds = (
        float(sys.argv[sys.argv.index("--daemon-seconds") + 1]) if "--daemon-seconds" in sys.argv else DAEMON_SECONDS
    )
    sizes = [int(a) for i, a in enumerate(sys.argv[1:], 1) if a.isdigit() and sys.argv[i - 1] != "--daemon-seconds"]
    for n in sizes or (5, 200, 300):
        row = measure(
            n,
            conf,
            daemon="--no-daemon" not in sys.argv,
            with_runs="--no-runs" not in sys.argv,
            checks="--checks" in sys.argv,
            daemon_seconds=seconds,
        )
        print(json.dumps(row), flush=True)
