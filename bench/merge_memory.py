"""Merge memory: 1M changed rows merged into a 10M-row Account replica, under each of delta-rs's merge settings.

The replica is `bench.merge_scaling.build_replica` (the platform's layout: `_sf_bucket` partitions, one file each,
as a resync leaves them). The changes are the newest values of 1,000,000 of its records, spread over the whole
table: a tenth of every partition, so the merge names and rewrites every one (the worst case for this layout;
changes to recent records touch a few partitions). Each setting merges into its own fresh copy of the replica through the
platform's own write (`DeltaWarehouse.commit_rows`: one merge, its partition predicate, its commit), in a process
of its own, so that its peak resident memory (`wait4`'s `ru_maxrss`) is the merge's and nothing else's.

    python -m bench.merge_memory [--rows 10000000] [--changes 1000000] [--pattern spread|recent] [--timeout 1800]

A setting that does not finish within `--timeout` seconds is reported as hung (delta-rs#4614: a bounded memory
pool can deadlock a merge whose plan repartitions).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.merge_scaling import SCHEMA, account_rows, build_replica
from object_schema.describe import BUCKET_COLUMN
from replication.apply import APPLY_APP
from replication.state import ReplicaState
from resources.delta import DeltaWarehouse

GIB = 1 << 30
PARTITION_RECORDS = 62 ** (18 - 3 - SCHEMA.bucket_chars)  # records a `_sf_bucket` holds (ids count up in base 62)
# (label, DeltaWarehouse merge settings): delta-rs's defaults first, the baseline the others are read against.
SETTINGS: list[tuple[str, dict]] = [
    ("delta-rs defaults (streamed, unbounded)", {"merge_streamed": True, "merge_memory_bytes": None}),
    ("not streamed, unbounded", {"merge_streamed": False, "merge_memory_bytes": None}),
    ("streamed, 2 GiB pool", {"merge_streamed": True, "merge_memory_bytes": 2 * GIB}),
    ("streamed, row groups of 1,024 rows", {"merge_row_group_rows": 1024}),
    ("streamed, row groups of 8,192 rows", {"merge_row_group_rows": 8192}),
]


def changed_rows(rows: int, changes: int, pattern: str) -> pa.Table:
    """New values for `changes` records of a `rows`-record replica. `spread`: the same share of every partition
    (one run of consecutive records per partition's worth of records), so the merge names and rewrites every
    partition; `recent`: the newest `changes` records (recently created records are the ones that change)."""
    rng = np.random.default_rng(7)
    if pattern == "recent":
        return account_rows(rows - changes + 1, changes, rng)
    run = max(1, changes * PARTITION_RECORDS // rows)
    runs = changes // run
    stride = rows // runs
    return pa.concat_tables([account_rows(1 + k * stride, run, rng) for k in range(runs)])


def merge_once(table_dir: Path, changes: Path, settings: dict) -> dict:
    """The platform's merge of `changes` into the replica at `table_dir` (run in a process of its own)."""
    rows = pq.read_table(changes).cast(SCHEMA.arrow_schema())
    warehouse = DeltaWarehouse(root=str(table_dir.parent), **settings)
    replica = warehouse.reloaded(table_dir.name)
    state = ReplicaState(applied_through=1)
    started = time.perf_counter()
    table = warehouse.commit_rows(
        table_dir.name,
        rows,
        read=replica,
        key_column="Id",
        partition_column=BUCKET_COLUMN,
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: 1},
    )
    seconds = time.perf_counter() - started
    metrics = table.history(1)[0].get("operationMetrics", {})
    return {
        "merge_s": round(seconds, 1),
        "rows_updated": int(metrics.get("num_target_rows_updated", -1)),
        "rows_copied": int(metrics.get("num_target_rows_copied", -1)),
    }


def measure(replica: Path, changes: Path, settings: dict, timeout: float) -> dict:
    """One setting: a fresh copy of the replica, the merge in a child process, its peak RSS from `wait4`."""
    with tempfile.TemporaryDirectory(prefix="merge-memory-", dir=replica.parent) as work:
        table_dir = Path(work) / "Account"
        shutil.copytree(replica, table_dir)
        spill = Path(work) / "spill"
        spill.mkdir()
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.merge_memory", "--one", str(table_dir), str(changes), json.dumps(settings)],
            stdout=subprocess.PIPE,
            env={**os.environ, "TMPDIR": str(spill)},  # where DataFusion spills
        )
        deadline = time.monotonic() + timeout
        while (done := os.wait4(child.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                child.kill()
                os.wait4(child.pid, 0)
                return {"hung_after_s": timeout}
            time.sleep(0.5)
        _, status, usage = done
        out = child.stdout.read().decode() if child.stdout else ""
        if os.waitstatus_to_exitcode(status) != 0:
            return {"failed": os.waitstatus_to_exitcode(status)}
        return json.loads(out.strip().splitlines()[-1]) | {"peak_rss_gb": round(usage.ru_maxrss / 1024 / 1024, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--only", action="append", help="label prefixes of the settings to run (default: all)")
    parser.add_argument("--pattern", choices=("spread", "recent"), default="spread")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        table_dir, changes, settings = args.one
        print(json.dumps(merge_once(Path(table_dir), Path(changes), json.loads(settings))), flush=True)
        return
    started = time.perf_counter()
    replica = build_replica(args.rows)
    print(json.dumps({"built_s": round(time.perf_counter() - started, 1), "replica": str(replica)}), flush=True)
    changes = replica.parent / f"merge-memory-changes-{args.rows}-{args.changes}-{args.pattern}.parquet"
    pq.write_table(changed_rows(args.rows, args.changes, args.pattern), changes)
    baseline = None
    for label, settings in SETTINGS:
        if args.only and not any(label.startswith(p) for p in args.only):
            continue
        line = {"setting": label, **settings, "rows": args.rows, "changes": args.changes, "pattern": args.pattern}
        line |= measure(replica, changes, settings, args.timeout)
        load = os.getloadavg()
        line["load"] = [round(x, 1) for x in load]
        if baseline is None and "peak_rss_gb" in line:
            baseline = line
        elif baseline and "peak_rss_gb" in line:
            line["rss_x_baseline"] = round(line["peak_rss_gb"] / baseline["peak_rss_gb"], 2)
            line["time_x_baseline"] = round(line["merge_s"] / baseline["merge_s"], 2)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
