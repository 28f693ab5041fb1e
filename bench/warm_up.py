"""The first catch-up on a freshly started Spark Connect server, with and without its warm-up
(`resources.spark_warm_up`).

Each round starts a fresh server (`resources.spark_connect`, as `make run` does), waits for its warm-up to finish
when it has one, then runs the same catch-up twice as a client, each in a fresh process (`PlatformRunner`: one
`materialize()` of change_events and the replicas, fresh warehouse): the first run is what the backlog after a
restart meets, the second what every later run meets. Rounds alternate the two servers.

`python -m bench.warm_up [--accounts 2500] [--changes 40000] [--rounds 2]`
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BENCH_SPARK
from demo import processes

REPO = Path(__file__).resolve().parent.parent
WARMED = re.compile(r"Spark warmed up in ([0-9.]+) s")


def client(accounts: int, changes: int) -> dict:
    """One catch-up in this process, as a client of `SPARK_REMOTE` (fresh warehouse)."""
    from bench.catchup import platform_over
    from bench.common import start_spark
    from bench.workloads import cdc_workload

    root = cdc_workload(f"catchup-{accounts}-{changes}", accounts=accounts, changes=changes)
    conf, _ = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-warm-up-"))
    try:
        wall, phases, metadata = platform_over(root, work, conf).run()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    events = int(metadata["change_events"]["events_parsed"])
    return {
        "wall_s": wall,
        "events": events,
        "events_per_s": events / wall,
        "parse_s": phases.get("ingest.parse", 0.0),
        "fold_s": phases.get("apply.fold", 0.0),
    }


def _client_run(url: str, accounts: int, changes: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.warm_up", "--client", "--accounts", str(accounts), "--changes", str(changes)],
        env=os.environ | {"SPARK_REMOTE": url},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"client failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def round_(warm_up: bool, accounts: int, changes: int, work: Path) -> dict:
    log_file = work / f"spark_connect-{'warm' if warm_up else 'cold'}-{time.monotonic_ns()}.log"
    started = time.perf_counter()
    server, url = processes.start_spark_connect(log_file, conf=BENCH_SPARK, warm_up_lines=None if warm_up else 0)
    listening = time.perf_counter() - started
    try:
        warm_up_s = None
        if warm_up:
            deadline = time.monotonic() + 600
            while (
                not (found := WARMED.search(log_file.read_text()))
                and time.monotonic() < deadline
                and server.poll() is None
            ):
                time.sleep(0.5)
            if not found:
                raise RuntimeError(f"the server did not warm up; see {log_file}")
            warm_up_s = float(found.group(1))
        first = _client_run(url, accounts, changes)
        second = _client_run(url, accounts, changes)
    finally:
        processes.stop(server)
    return {"warm_up": warm_up, "listening_s": listening, "warm_up_s": warm_up_s, "first": first, "second": second}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.warm_up", description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=2500)
    parser.add_argument("--changes", type=int, default=40000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each server (alternating)")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(client(args.accounts, args.changes)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-warm-up-logs-"))
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print("| server | listening s | warm-up s | first run s (events/s) | parse / fold s | second run s (events/s) |")
    print("|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for warm_up in (False, True):
            r = round_(warm_up, args.accounts, args.changes, work)
            first, second = r["first"], r["second"]
            print(
                f"| {'warmed up' if warm_up else 'no warm-up'} | {r['listening_s']:.1f} | "
                f"{r['warm_up_s'] if r['warm_up_s'] is not None else '-'} | "
                f"{first['wall_s']:.2f} ({first['events_per_s']:,.0f}) | {first['parse_s']:.1f} / "
                f"{first['fold_s']:.1f} | {second['wall_s']:.2f} ({second['events_per_s']:,.0f}) |",
                flush=True,
            )
    print(f"load average {os.getloadavg()[0]:.1f}; server logs in {work}", flush=True)


if __name__ == "__main__":
    main()
