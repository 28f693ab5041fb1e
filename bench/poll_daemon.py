"""Hundreds of polled objects under the real Dagster daemon, for half an hour (issue 47).

`python -m bench.poll_daemon [N ...] [--minutes 30] [--interval 300] [--share 0.1] [--at spread|start] [--deploy]`
(default N: 300 999, the most the emulator names): an emulator org of N generated custom objects (`Thing_001__c`
..., 3 records each), every one `source: poll` at `poll_interval` S with `initial_load` (bench/poll_cycle.py
`polled_config`), and the real daemon with the sensors on, runs queued and launched as the repository's
dagster.yaml says (2 at once; SQLite in a private temporary home, or with `--postgres` a PostgreSQL cluster of its
own as deploy/dagster-postgres.yaml has it). Which processes:
- by default `dagster-daemon run` over the repository's workspace.yaml, which names the Python module: the daemon
  starts its own code server, and a new one every minute (Dagster's daemon controller refreshes its workspace every
  `RELOAD_WORKSPACE_INTERVAL`, 60 s, clearing its gRPC endpoints), each importing `definitions` for the N objects;
  the old one ends once idle for 20 s. Each run starts a local Spark JVM (the `pyspark` resource);
- with `--deploy`, deploy/'s processes: a Spark Connect server the runs share, `dagster code-server start` on a unix
  socket (deploy/sf-cdc-code-server.service), and the daemon reaching it through a workspace.yaml naming the socket.

Once every replica table exists (the initial load), the sitting runs M minutes of cycles, each one `poll_interval`
long and aligned with the poll sensor's windows (sensors/cycle.py: n = seconds since the epoch // interval). Every
other cycle, from the second, is busy: a share of the objects (default a tenth, drawn anew each time) gets one
changed record each, through the emulator's store as the workload does (`Workload.touch_each`), the org's commit
time of each noted. With `--at spread` (the default) each change commits at its own random moment of the cycle: a
change just after the sensor polled its object waits a whole interval, one just before it hardly any, and the goal
is about any change. `--at start` commits them all as the cycle opens, before most of the window's sensor ticks:
the best case.

Figures, per N (one JSON line, then a summary):
- per cycle: CPU seconds of everything it started (daemon, code servers, run workers, Spark JVMs): utime + stime of
  each live process, plus cutime + cstime, the ended children it reaped (a run worker's time moves to the code
  server when it ends); this process is their subreaper, so a run's Spark JVM that outlives its worker (re-parented
  to init otherwise, its time lost) is adopted and counted. Also the machine's CPU use (/proc/stat: a share of all
  its cores, whatever runs on it; the goal under half), API calls by resource (the emulator's request counts), the
  runs created in the cycle, the code servers started; and this process's own CPU (the emulator serving those
  calls, the probes below);
- the same averaged over busy cycles, idle ones (no change committed in it) and quiet ones (idle, and no run): an
  idle cycle may still have runs, since an object whose last poll read less than `poll_overlap` after its cursor is
  polled again in its next window (sensors/poll.py `quiet_objects`);
- org commit -> row in Delta, per change: every `PROBE_SECONDS` the changed record is read from its replica (only
  when the table's `_delta_log` changed) until its `_sf_commit_ts` reaches the commit; p50, p95, max and the goal
  p95 <= interval + 60 s. A change not seen within `interval + DRAIN_SECONDS` after the last cycle is `unseen`;
- peak RSS of the largest process of each kind (bench/many_objects.py `process_rss`; samples every `RSS_SECONDS`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable

from bench.common import cpu_seconds, machine_ticks, process_tree
from bench.many_objects import RECORDS_PER_OBJECT, process_rss
from bench.poll_cycle import polled_config
from demo import postgres, processes
from demo.instance import open_instance, write_dagster_home
from demo.latency import p95
from resources.delta import read_table
from salesforce_emulator import Emulator
from salesforce_emulator.changes import CommittedTransaction
from salesforce_emulator.custom_objects import MAX_CUSTOM_OBJECTS, custom_object_name
from salesforce_emulator.workload import Workload

PROBE_SECONDS = 2.0
RSS_SECONDS = 10.0
DRAIN_SECONDS = 300.0  # how long past the next window a change may still be polled (its run)
GOAL_SLACK_SECONDS = 60.0  # the goal: p95 <= interval + this
CODE_SERVER_START_SECONDS = 300  # deploy/sf-cdc-code-server.service's TimeoutStartSec
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
AVERAGED = ("cpu_s", "machine_cpu", "bench_cpu_s", "runs", "code_servers_started")  # a cycle's, over cycles


@dataclass
class Change:
    name: str
    record_id: str
    commit_ms: int  # the org's commit: the record's SystemModstamp, epoch ms
    log_mtime: int = 0  # the replica's _delta_log folder when last read (a commit changes it)
    seen: float | None = None

    @property
    def committed(self) -> float:
        return self.commit_ms / 1000

    @property
    def latency(self) -> float | None:
        return None if self.seen is None else self.seen - self.committed


def replica_commit_ms(table: Path, record_id: str) -> int:
    """The `_sf_commit_ts` (epoch ms) of the record's row in the replica at `table`; -1 without one."""
    # The cast: delta-rs writes some files' strings as string_view (demo/latency.py).
    where = pc.field("Id").cast(pa.string()) == record_id
    rows = read_table(DeltaTable(str(table)), columns=["_sf_commit_ts"], filter=where)
    stamp = rows.column(0)[0].as_py() if rows.num_rows else None
    return -1 if stamp is None else round(stamp.replace(tzinfo=stamp.tzinfo or UTC).timestamp() * 1000)


def adopt_orphans() -> None:
    """Make this process the subreaper of all it starts: a process whose parent ends first (a run's Spark JVM
    outlives its run worker) comes here instead of to init, and its CPU time still counts (`Sitting.cpu_seconds`)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(exclude: set[int]) -> None:
    """Reap the adopted processes that ended (their CPU time moves to this process's children's time); `exclude`:
    the children `subprocess` waits for itself."""
    for pid, status in process_tree().items():
        if status["PPid"].strip() == str(os.getpid()) and status["State"].startswith("Z") and int(pid) not in exclude:
            os.waitpid(int(pid), os.WNOHANG)


class Sitting:
    """Dagster's processes over the org, sampled cycle by cycle; SIGINT or SIGTERM stops it (`KeyboardInterrupt`)."""

    def __init__(self, root: Path, emu: Emulator, workload: Workload, names: list[str], args: argparse.Namespace):
        self.root, self.emu, self.workload, self.names, self.args = root, emu, workload, names, args
        self.warehouse = root / "warehouse"
        if args.postgres and os.geteuid() == 0:
            root.chmod(0o711)  # the server's account passes through to its own 0700 folder (demo/main.py)
        self.postgres = postgres.start(root / "postgres", processes.free_port()) if args.postgres else None
        self.home = write_dagster_home(
            root / "dagster_home",
            storage="postgres" if self.postgres else "sqlite",
            pg=self.postgres.env() if self.postgres else None,
        )
        self.stop = processes.StopOnSignal()
        self.rng = random.Random(args.seed)
        self.changes: list[Change] = []
        self.rss: dict[str, float] = {}  # the largest process of each kind (`process_rss`)
        self.code_servers: set[int] = set()  # every code server seen
        self.last_rss = 0.0
        self.started: dict[str, tuple[subprocess.Popen, Path]] = {}  # what it started, in order, and its log

    def start(self) -> None:
        """The daemon over the org's code location (module docstring: by default, or `--deploy`)."""
        config = polled_config(self.root / "replication.yaml", self.names, poll_interval=self.args.interval)
        extra, workspace = {}, processes.REPO / "workspace.yaml"
        if self.args.deploy:
            spark, extra["SPARK_REMOTE"] = processes.start_spark_connect(self.root / "spark_connect.log")
            self.started["the Spark Connect server"] = (spark, self.root / "spark_connect.log")
        landing = self.root / "landing"
        env = processes.platform_env(
            home=self.home, config=config, landing=landing, warehouse=self.warehouse, emu=self.emu, extra=extra
        )
        if self.args.deploy:
            workspace = self._start_code_server(env)
        log = self.root / "daemon.log"
        self.started["dagster-daemon"] = (
            processes.start(["dagster-daemon", "run", "-w", str(workspace)], env, log),
            log,
        )

    def _start_code_server(self, env: dict[str, str]) -> Path:
        """The code server as deploy/ runs it, once it serves; the workspace.yaml that reaches it."""
        (self.root / "code-server").mkdir(mode=0o700)
        socket, log = self.root / "code-server" / "grpc.sock", self.root / "code_server.log"
        # deploy/sf-cdc-code-server.service's ExecStart
        options = {"--socket": socket, "--working-directory": processes.REPO, "--module-name": "definitions"}
        command = ["dagster", "code-server", "start", *(w for o, v in options.items() for w in (o, str(v)))]
        server = processes.start([*command, "--location-name", "definitions"], env, log)
        self.started["the code server"] = (server, log)
        health = [str(processes.BIN / "dagster"), "api", "grpc-health-check", "--socket", str(socket)]
        deadline = time.monotonic() + CODE_SERVER_START_SECONDS
        while subprocess.run(health, capture_output=True, check=False).returncode:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the code server did not serve within {CODE_SERVER_START_SECONDS} s; see {log}")
            self.wait(2)
        workspace = self.root / "workspace.yaml"
        location = {"grpc_server": {"socket": str(socket), "location_name": "definitions"}}
        workspace.write_text(yaml.safe_dump({"load_from": [location]}))
        return workspace

    def cpu_seconds(self) -> float:
        """CPU seconds of everything this process started, the orphans it adopted included, less its own."""
        own = os.times()
        return cpu_seconds(os.getpid()) - own.user - own.system

    def stop_all(self) -> None:
        """Everything it started stopped, the daemon first (each a process group: code servers, run workers, JVMs)."""
        for process, _ in reversed(self.started.values()):
            processes.stop(process)
        reap_orphans(exclude=set())
        if self.postgres is not None:
            postgres.stop(self.postgres)

    def wait(self, seconds: float) -> None:
        """Sleep, sampling RSS; KeyboardInterrupt on SIGINT or SIGTERM, RuntimeError if a process it started ended."""
        if self.stop.wait(max(0.0, seconds)):
            raise KeyboardInterrupt
        if exited := processes.first_exited(dict(self.started)):
            raise RuntimeError(exited)
        reap_orphans(exclude={process.pid for process, _ in self.started.values()})
        if time.monotonic() - self.last_rss >= RSS_SECONDS:
            self.last_rss = time.monotonic()
            for pid, (kind, mb) in process_rss(os.getpid()).items():
                if pid == os.getpid():
                    continue
                self.rss[kind] = max(self.rss.get(kind, 0.0), mb)
                if kind == "code_server":
                    self.code_servers.add(pid)

    def initial_load(self, timeout: float) -> dict:
        """Wait until every replica table exists: seconds (from the daemon's start), runs so far."""
        started, missing = time.monotonic(), list(self.names)
        while missing:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{len(missing)} replicas missing after {timeout:.0f} s; see {self.root}/*.log")
            self.wait(PROBE_SECONDS)
            missing = [n for n in missing if not DeltaTable.is_deltatable(str(self.warehouse / n))]
        with open_instance(self.home) as instance:
            return {"seconds": round(time.monotonic() - started, 1), "runs": len(instance.get_run_records())}

    def change(self, name: str) -> None:
        """One record of `name` changed (`Workload.touch_each`), its commit noted."""
        committed: list[CommittedTransaction] = []
        self.emu.store.add_listener(committed.append)
        try:
            self.workload.touch_each([name])
        finally:
            self.emu.store.remove_listener(committed.append)
        [txn] = committed
        [record_id] = [r for c in txn.changes for r in c.record_ids]
        self.changes.append(Change(name, record_id, txn.commit_ts))

    def probe(self) -> None:
        """Each change not seen yet read from its replica, if the table has a commit since the last read."""
        for c in (c for c in self.changes if c.seen is None):
            if c.log_mtime != (log := (self.warehouse / c.name / "_delta_log").stat().st_mtime_ns):
                c.log_mtime = log
                if replica_commit_ms(self.warehouse / c.name, c.record_id) >= c.commit_ms:
                    c.seen = time.time()

    def cycle(self, start: float, busy: bool) -> dict:
        """One poll window from `start` (epoch seconds): its changes if `busy`, and its figures."""
        end, due = start + self.args.interval, []
        if busy:
            chosen = self.rng.sample(self.names, max(1, round(len(self.names) * self.args.share)))
            spread = self.args.at == "spread"
            due = sorted((start + (self.rng.uniform(0, end - start) if spread else 0.0), n) for n in chosen)
        self.emu.reset_request_counts()
        cpu, machine, own = self.cpu_seconds(), machine_ticks(), time.process_time()
        code_servers = len(self.code_servers)
        while (now := time.time()) < end:
            while due and due[0][0] <= now:
                self.change(due.pop(0)[1])
            self.probe()
            self.wait(min(PROBE_SECONDS, end - time.time(), *(at - time.time() for at, _ in due[:1])))
        busy_ticks, all_ticks = (b - a for a, b in zip(machine, machine_ticks()))
        window = dg.RunsFilter(
            created_after=datetime.fromtimestamp(start, UTC), created_before=datetime.fromtimestamp(end, UTC)
        )
        with open_instance(self.home) as instance:
            runs = instance.get_run_records(filters=window)
        return {
            "busy": busy,
            "changes": sum(1 for c in self.changes if start <= c.committed < end),
            "cpu_s": round(self.cpu_seconds() - cpu, 1),
            "machine_cpu": round(busy_ticks / all_ticks, 3),
            "bench_cpu_s": round(time.process_time() - own, 1),
            "api_calls": dict(sorted(self.emu.request_counts().items())),
            "runs": len(runs),
            "runs_failed": sum(1 for r in runs if r.dagster_run.status == dg.DagsterRunStatus.FAILURE),
            "code_servers_started": len(self.code_servers) - code_servers,
        }

    def drain(self, deadline: float) -> None:
        """Probe until every change is seen or `deadline` (epoch seconds)."""
        while any(c.seen is None for c in self.changes) and time.time() < deadline:
            self.probe()
            self.wait(PROBE_SECONDS)


def measure(objects: int, args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"bench-poll-daemon-{objects}-"))  # 0700, this user's
    names = [custom_object_name(n) for n in range(1, objects + 1)]
    emu = Emulator(root / "org", custom_objects=objects)  # 127.0.0.1, a free port
    sitting, failed = None, False
    try:
        workload = Workload(emu, seed=args.seed, custom_objects=objects, custom_records=RECORDS_PER_OBJECT)
        workload.build_org(accounts=2)
        emu.start()
        sitting = Sitting(root, emu, workload, names, args)
        sitting.start()
        load = sitting.initial_load(timeout=600 + 3 * objects)
        first = (time.time() // args.interval + 1) * args.interval  # the next poll window
        sitting.wait(first - time.time())
        count = max(1, round(args.minutes * 60 / args.interval))
        cycles = [sitting.cycle(first + i * args.interval, busy=i % 2 == 1) for i in range(count)]
        sitting.drain(first + (count + 1) * args.interval + DRAIN_SECONDS)
        return figures(objects, args, load, cycles, sitting)
    except Exception:
        failed = True  # its logs kept to read (not when stopped: KeyboardInterrupt)
        raise
    finally:
        if sitting is not None:
            sitting.stop_all()
        emu.stop()
        if failed or args.keep:
            print(f"kept {root} (the logs, the org, the warehouse, the Dagster instance)", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _average(cycles: list[dict]) -> dict:
    calls: Counter[str] = Counter()
    for c in cycles:
        calls.update(c["api_calls"])
    mean = {k: round(statistics.fmean(c[k] for c in cycles), 3) if cycles else None for k in AVERAGED}
    return {
        "cycles": len(cycles),
        "cycles_with_runs": sum(1 for c in cycles if c["runs"]),
        **mean,
        "api_calls": {k: round(v / len(cycles), 1) for k, v in sorted(calls.items())},
    }


def figures(objects: int, args: argparse.Namespace, load: dict, cycles: list[dict], sitting: Sitting) -> dict:
    latencies = sorted(c.latency for c in sitting.changes if c.latency is not None)
    goal = args.interval + GOAL_SLACK_SECONDS
    idle = [c for c in cycles if not c["busy"]]
    return {
        "objects": objects,
        "interval_s": args.interval,
        "minutes": args.minutes,
        "share": args.share,
        "at": args.at,
        "layout": "deploy" if args.deploy else "daemon",
        "storage": "postgres" if args.postgres else "sqlite",
        "initial_load": load,
        "busy": _average([c for c in cycles if c["busy"]]),
        "idle": _average(idle),
        "quiet": _average([c for c in idle if not c["runs"]]),
        "latency_s": {
            "changes": len(sitting.changes),
            "unseen": len(sitting.changes) - len(latencies),
            "p50": round(statistics.median(latencies), 1) if latencies else None,
            "p95": round(p95(latencies), 1) if latencies else None,
            "max": round(latencies[-1], 1) if latencies else None,
            "goal_s": goal,
            "goal_met": len(latencies) == len(sitting.changes) > 0 and p95(latencies) <= goal,
        },
        "runs_failed": sum(c["runs_failed"] for c in cycles),
        "peak_rss_mb": {k: round(v, 1) for k, v in sorted(sitting.rss.items())},
        "cycles": cycles,
    }


def summary(r: dict) -> str:
    lat = r["latency_s"]
    lines = [
        f"{r['objects']} polled objects, poll_interval {r['interval_s']:g} s, {r['minutes']:g} min ({r['layout']}, "
        f"{r['storage']}): "
        f"initial load {r['initial_load']['seconds']} s ({r['initial_load']['runs']} runs)"
    ]
    for kind in ("quiet", "idle", "busy"):
        if (k := r[kind])["cycles"]:
            lines.append(
                f"  {kind} cycle ({k['cycles']}, {k['cycles_with_runs']} with runs): {k['cpu_s']} CPU s (Dagster's "
                f"processes), machine {k['machine_cpu']:.0%} of its cores, this process {k['bench_cpu_s']} CPU s, "
                f"{k['runs']} runs, {k['code_servers_started']} code servers started; API calls {k['api_calls']}"
            )
    lines.append(
        f"  org commit -> row in Delta ({lat['changes']} changes, {lat['unseen']} unseen, --at {r['at']}): p50 "
        f"{lat['p50']} s, p95 {lat['p95']} s, max {lat['max']} s; goal p95 <= {lat['goal_s']:g} s: "
        f"{'met' if lat['goal_met'] else 'NOT met'}"
    )
    lines.append(f"  peak RSS (MB): {r['peak_rss_mb']}; failed runs: {r['runs_failed']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.poll_daemon", description=__doc__.splitlines()[0])
    parser.add_argument(
        "objects",
        nargs="*",
        type=int,
        default=[300, MAX_CUSTOM_OBJECTS],
        help=f"objects to poll, a sitting each (default: 300 {MAX_CUSTOM_OBJECTS}, the most the emulator names)",
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="the sitting's length after the initial load")
    parser.add_argument("--interval", type=float, default=300.0, help="poll_interval, seconds (a cycle)")
    parser.add_argument("--share", type=float, default=0.1, help="share of the objects a busy cycle changes")
    parser.add_argument(
        "--at", choices=("spread", "start"), default="spread", help="when a busy cycle's changes commit"
    )
    parser.add_argument("--deploy", action="store_true", help="deploy/'s processes (module docstring)")
    parser.add_argument(
        "--postgres", action="store_true", help="the instance in a PostgreSQL of its own (deploy/dagster-postgres.yaml)"
    )
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep its folder (logs, org, warehouse, instance)")
    args = parser.parse_args(argv)
    if not all(0 < n <= MAX_CUSTOM_OBJECTS for n in args.objects):
        parser.error(f"the emulator names 1 to {MAX_CUSTOM_OBJECTS} objects")
    adopt_orphans()
    print(f"load average {os.getloadavg()[0]:.1f} at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    try:
        for objects in args.objects:
            result = measure(objects, args)
            print(json.dumps(result), flush=True)
            print(summary(result), flush=True)
            print(f"(load average {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M:%S %Z')})", flush=True)
    except KeyboardInterrupt:
        raise SystemExit("stopped: every process it started has been stopped") from None


if __name__ == "__main__":
    main()
