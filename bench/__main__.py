"""`python -m bench [catchup|steady|merge|initial|wide|subscriber|datastream|formulas ...] [--small]`: run benchmarks
(default: all) and print their figures (see bench/RESULTS.md)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from functools import partial

from bench import catchup, datastream, formulas, history, initial_load, merge_scaling, poll, steady, subscriber, wide

# workload -> (full size, --small size), as keyword arguments of its run()
WORKLOADS = {
    "catchup": (catchup.run, {"accounts": 10_000, "changes": 300_000}, {"accounts": 250, "changes": 4_000}),
    "steady": (steady.run, {"runs": 100}, {"runs": 10}),
    "steady-local": (partial(steady.run, spark="local"), {"runs": 10}, {"runs": 3}),
    "merge": (
        merge_scaling.run,
        {"small_rows": 100_000, "large_rows": 10_000_000},
        {"small_rows": 100_000, "large_rows": 1_000_000},
    ),
    "initial": (initial_load.run, {"records": 1_000_000}, {"records": 50_000}),
    "poll": (poll.run, {"records": 1_000_000, "changes": 1_000}, {"records": 50_000, "changes": 1_000}),
    "formulas": (formulas.run, {"records": 1_000_000, "changes": 1_000}, {"records": 50_000, "changes": 1_000}),
    "wide": (wide.run, {"records": 5_000, "updates": 20_000}, {"records": 500, "updates": 2_000}),
    "subscriber": (subscriber.run, {"accounts": 2_000, "changes": 30_000}, {"accounts": 100, "changes": 2_000}),
    "datastream": (datastream.run, {"accounts": 2_000, "changes": 20_000}, {"accounts": 200, "changes": 2_000}),
    "history": (
        history.run,
        {"accounts": 2_000, "changes": 60_000, "runs": 20},
        {"accounts": 250, "changes": 4_000, "runs": 5},
    ),
}
HEADER = ("workload", "unit", "count", "wall_s", "per_s", "x_floor", "x_baseline", "peak_rss_mb")


def _catchup_row(r: dict) -> dict:
    """The catch-up figures in the common shape (its naive baseline is the `baseline`)."""
    return r | {"unit": "events", "count": r["events"], "per_s": r["events_per_s"], "x_baseline": r["x_naive"]}


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _rounded(value):
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument(
        "workloads", nargs="*", metavar="workload", help=f"which to run: {', '.join(WORKLOADS)} (default: all)"
    )
    parser.add_argument("--small", action="store_true", help="a quick run (smaller sizes, see WORKLOADS)")
    args = parser.parse_args()
    if unknown := [w for w in args.workloads if w not in WORKLOADS]:
        parser.error(f"unknown workload {', '.join(unknown)}: choose from {', '.join(WORKLOADS)}")
    chosen = args.workloads or list(WORKLOADS)
    if len(chosen) > 1:
        # One process per workload: each gets its own Spark driver, so its peak RSS is its own.
        for name in chosen:
            subprocess.run([sys.executable, "-m", "bench", name, *(["--small"] if args.small else [])], check=True)
        return
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M %Z')}; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print("x_floor = our wall / the floor's; x_baseline = the baseline's wall / ours (higher is better)")
    name = chosen[0]
    run, full, small = WORKLOADS[name]
    rows = run(**(small if args.small else full))
    print(" | ".join(HEADER))
    for r in rows:
        r = _catchup_row(r) if name == "catchup" else r
        print(" | ".join(_cell(r.get(h)) for h in HEADER))
        details = {k: v for k, v in r.items() if k not in HEADER and k not in ("events", "events_per_s")}
        print("  " + json.dumps(_rounded(details), default=str))
    print(f"  (load average now {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
