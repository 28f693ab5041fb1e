"""The Dagster instance on SQLite and on PostgreSQL, measured in one sitting: sensor tick time, run launch latency,
a landing run's fixed cost.

The 5-object platform (the describe files of a generated workload), a warm Spark Connect server shared by both, and
for each storage a DAGSTER_HOME of its own (the repository's dagster.yaml; for PostgreSQL followed by
deploy/dagster-postgres.yaml, on a local cluster started by demo/postgres.py as `make run PG=1` does):

- **daemon**: `dagster-daemon run` with every sensor running while `--files` small landing files land one at a
  time (each once the platform is at rest again). From the instance: each sensor tick's duration (start -> end),
  and each landing run's launch, per phase (demo/run_timeline.py): requested (created) -> launched (`RUN_STARTING`)
  -> worker process up -> `RUN_START`; "requested -> started" is the sum.
- **idle run**: bench/idle_run.py's landing run with nothing to do, in a fresh process (`--times`, the storages
  interleaved): its total and its "run creation" (the run and its planned events written -> `RUN_START`).

Ratios are PostgreSQL / SQLite (below 1: PostgreSQL faster).

    python -m bench.storage [--files 5] [--times 3] [--first sqlite|postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.idle_run import LISTS, _materialize, _phases, _setup
from bench.workloads import cdc_workload
from demo import postgres as pg
from demo import processes
from demo.instance import STORAGES, Storage, in_flight_runs, open_instance
from demo.main import WORKSPACE
from demo.run_timeline import run_timeline

REPO = Path(__file__).resolve().parent.parent
LANDING_SENSOR = "landing_zone_sensor"
FIRST_LINES = 200  # the file ingested before measuring
CHUNK_LINES = 40  # each landed file during the daemon phase
SETTLE_TIMEOUT_SECONDS = 300


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _land(workload: Path, landing: Path, index: int) -> None:
    """The index-th chunk of the workload's first file after the lines already ingested, as a new landing file."""
    first = sorted((workload / "landing").rglob("*.jsonl"))[0]
    lines = first.read_text().splitlines()
    start = FIRST_LINES + index * CHUNK_LINES
    chunk = lines[start : start + CHUNK_LINES]
    if not chunk:
        raise RuntimeError(f"the workload's first file has only {len(lines)} lines: use fewer --files")
    staging = landing / f".{index:04d}.jsonl"  # written, then renamed: a reader never sees half a file
    staging.write_text("\n".join(chunk) + "\n")
    staging.rename(landing / f"{index + 1:04d}.jsonl")


def _settle(home: Path, since: float, daemon) -> None:  # type: ignore[no-untyped-def]
    """Until a run created after `since` exists and no run is queued or in flight."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError("dagster-daemon exited: see its log")
        with open_instance(home) as instance:
            new = [r for r in instance.get_run_records(limit=5) if r.create_timestamp.timestamp() > since]
            if new and not in_flight_runs(instance):
                return
        time.sleep(1)
    raise RuntimeError(f"no landing run settled within {SETTLE_TIMEOUT_SECONDS} s")


def _daemon_figures(home: Path, since: float) -> dict:
    with open_instance(home) as instance:
        ticks: dict[str, list[float]] = {}
        for state in instance.all_instigator_state():
            for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1000):
                if tick.timestamp >= since and tick.end_timestamp is not None:
                    ticks.setdefault(state.name, []).append(tick.end_timestamp - tick.timestamp)
        phases: dict[str, list[float]] = {
            "requested -> launched": [],
            "launched -> process": [],
            "process -> run start": [],
        }
        total: list[float] = []
        for record in instance.get_run_records():
            t = run_timeline(instance, record.dagster_run.run_id)
            if t.sensor != LANDING_SENSOR or t.created < since or None in (t.launched, t.process, t.run_start):
                continue
            phases["requested -> launched"].append(t.launched - t.created)  # type: ignore[operator]
            phases["launched -> process"].append(t.process - t.launched)  # type: ignore[operator]
            phases["process -> run start"].append(t.run_start - t.process)  # type: ignore[operator]
            total.append(t.run_start - t.created)  # type: ignore[operator]
    every_tick = [d for durations in ticks.values() for d in durations]
    return {
        "landing runs": len(total),
        "requested -> started_s": _median(total),
        **{f"{k}_s": _median(v) for k, v in phases.items()},
        "tick_s (every sensor)": _median(every_tick),
        "ticks": len(every_tick),
        **{f"tick_s {name}": _median(durations) for name, durations in sorted(ticks.items())},
    }


def _daemon(env: dict[str, str], workload: Path, files: int, log: Path) -> dict:
    """`dagster-daemon run` while `files` landing files land, each once the one before is done."""
    home, landing = Path(env["DAGSTER_HOME"]), Path(env["CDC_LANDING_ZONE"])
    daemon = processes.start(["dagster-daemon", "run", "-w", str(WORKSPACE)], env | {"CDC_SENSORS_RUNNING": "1"}, log)
    try:
        _settle(home, 0.0, daemon)  # the first file, landed at setup: the code location loaded, the replicas made
        since = time.time()
        for index in range(files):
            landed = time.time()
            _land(workload, landing, index)
            _settle(home, landed, daemon)
    finally:
        processes.stop(daemon)
    return _daemon_figures(home, since)


def run(files: int = 5, times: int = 3, order: tuple[Storage, ...] = STORAGES) -> dict:
    """The figures of each storage, measured in `order` (the daemon phases one after the other, then the idle runs
    interleaved)."""
    workload = cdc_workload("storage-300-3000", accounts=300, changes=3000)
    work = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    # A folder of its own: run as root, the server's account must pass through the folders above it.
    pg_root = Path(tempfile.mkdtemp(prefix="bench-storage-pg-"))
    server = cluster = None
    try:
        cluster = pg.database(pg.start(pg_root, processes.free_port()), "bench_storage")
        server, remote = processes.start_spark_connect(work / "spark_connect.log")
        settings: dict[Storage, dict[str, str] | None] = {"sqlite": None, "postgres": cluster.env()}
        envs = {
            storage: _setup(work / storage, workload, REPO, remote, storage, settings[storage], FIRST_LINES)
            for storage in STORAGES
        }
        out: dict = {"daemon": {}, "idle run": {}}
        for storage in order:
            load = os.getloadavg()[0]
            out["daemon"][storage] = _daemon(envs[storage], workload, files, work / f"daemon-{storage}.log")
            out["daemon"][storage]["load average (start, end)"] = [round(load, 1), round(os.getloadavg()[0], 1)]
            print(storage, json.dumps(out["daemon"][storage]), flush=True)
        rows: dict[str, list[dict]] = {storage: [] for storage in STORAGES}
        for _ in range(times):
            for storage in order:
                spawned, exited = _materialize(envs[storage], REPO)
                with open_instance(Path(envs[storage]["DAGSTER_HOME"])) as instance:
                    rows[storage].append(_phases(instance, spawned, exited))
        for storage, measured in rows.items():
            out["idle run"][storage] = {
                f"{k}_s": _median([r[k] for r in measured]) for k in measured[0] if k not in LISTS
            }
    finally:
        if server is not None:
            processes.stop(server)
        if cluster is not None:
            pg.stop(cluster)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(pg_root, ignore_errors=True)
    out["postgres / sqlite"] = {
        part: {
            k: round(out[part]["postgres"][k] / out[part]["sqlite"][k], 2)
            for k in out[part]["sqlite"]
            if "_s" in k and out[part]["sqlite"][k] and out[part]["postgres"].get(k) is not None
        }
        for part in ("daemon", "idle run")
    }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5, help="landing files landed one at a time under the daemon")
    parser.add_argument("--times", type=int, default=3, help="idle landing runs per storage")
    parser.add_argument(
        "--first", choices=STORAGES, default="sqlite", help="the storage measured first (the load drifts: swap it)"
    )
    args = parser.parse_args(argv)
    order = tuple(sorted(STORAGES, key=lambda storage: storage != args.first))
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()[0]:.1f}", flush=True)
    print(json.dumps(run(args.files, args.times, order), indent=1))
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
