"""`python -m bench.changefeed [--rows N] [--changes N] [--versions N]`: export time of the replica changefeed.

A synthetic replica (30 data columns + the system columns) written through DeltaWarehouse as the platform writes
it: a create, `versions` merges of `changes / versions` changed rows each (a tenth of them bookkeeping-only, which
the feed must not emit), then a resync overwrite of every row in which 1% differ. Prints, per phase: records
emitted, wall time, records/s, bytes written. No Spark: the exporter is pyarrow.

`--memory 20000,80000,320000 [--batch-rows N]`: peak memory of an export as the table grows. For each size a
replica is created, then a child process exports its initial scan; the replica is resynced (every row rewritten,
1% differ) and another child exports that version. Each child reports its peak RSS (`VmHWM`), next to an
idle child's (imports only): the export's own peak is the difference, and its wall time. Run once with the given
`--batch-rows` and once with one batch larger than the table (one pass; `--no-one-pass` skips it).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from cdc_assets.changefeed.export import export_changefeed
from replication.changefeed.config import ChangefeedConfig
from resources.delta import DeltaWarehouse, read_table

COLUMNS = 30
TS = pa.timestamp("us", tz="UTC")
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _rows(ids: list[int], rng: random.Random, *, salt: int, deleted=False) -> pa.Table:
    n = len(ids)
    cols = {"Id": [f"001{i:015d}" for i in ids]}
    for c in range(COLUMNS):
        cols[f"Field{c}__c"] = [f"value {i} {c} {salt if rng.random() < 0.2 else 0}" for i in ids]
    cols |= {
        "_sf_deleted": [deleted] * n,
        "_sf_commit_ts": pa.array([T0 + timedelta(seconds=salt)] * n, TS),
        "_sf_replay_id": pa.array([salt] * n, pa.int64()),
        "_sf_source": ["cdc"] * n,
        "_sf_synced_at": pa.array([datetime.now(UTC)] * n, TS),
        "_sf_bucket": [f"001{i:015d}"[:8] for i in ids],
    }
    return pa.table(cols)


def _export(warehouse: DeltaWarehouse, feed: ChangefeedConfig, label: str) -> None:
    started = time.perf_counter()
    result = export_changefeed(warehouse, "Account", feed)
    wall = time.perf_counter() - started
    records = sum(result.records.values())
    size = sum(p.stat().st_size for p in Path(feed.object_uri("Account")).glob("*.jsonl"))
    print(
        f"{label:<34} {records:>9,} records {wall:>8.2f} s {records / wall:>10,.0f} rec/s "
        f"{size / 1e6:>8.1f} MB  {result.records}"
    )


def _own_peak_mb() -> float:
    """This process's peak RSS in MB: its memory map's high-water mark (`VmHWM`). Not `ru_maxrss`: on Linux a
    child started by subprocess (vfork, then exec) inherits the parent's peak in it, so it read the bench
    parent's peak (the tables it built) whenever that was higher than the child's own."""
    try:
        status = Path("/proc/self/status").read_text()
    except FileNotFoundError:  # not Linux: ru_maxrss (kilobytes on Linux, bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 if sys.platform != "darwin" else 1024) / 1024
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024


def _child_export(warehouse: str, feed: str, batch_rows: int) -> None:
    """In a child process: one export; prints its records, wall seconds and peak RSS (MB) as JSON."""
    started = time.perf_counter()
    if feed:
        config = ChangefeedConfig(uri=feed, initial_scan=True, batch_rows=batch_rows)
        result = export_changefeed(DeltaWarehouse(root=warehouse), "Account", config)
        records = sum(result.records.values())
    else:
        records = 0  # the idle child: imports only
    print(json.dumps({"records": records, "seconds": time.perf_counter() - started, "peak_mb": _own_peak_mb()}))


def _peak(warehouse: Path, feed: Path | None, batch_rows: int) -> dict:
    code = (
        "import sys; from bench.changefeed import _child_export; "
        "_child_export(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(warehouse), str(feed or ""), str(batch_rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory(sizes: list[int], batch_rows: int, *, one_pass: bool = True) -> None:
    idle = _peak(Path("."), None, 0)["peak_mb"]
    print(f"idle child (imports only): {idle:.0f} MB peak RSS")
    print(
        f"{'rows':>9} {'batch_rows':>10} {'scan records':>12} {'scan MB':>8} {'scan s':>7} {'resync records':>14} "
        f"{'resync MB':>9} {'resync s':>8}"
    )
    for rows in sizes:
        for batch in (batch_rows, rows * 3) if one_pass else (batch_rows,):
            root = Path(tempfile.mkdtemp(prefix="bench-changefeed-memory-"))
            try:
                warehouse = DeltaWarehouse(root=str(root / "warehouse"))
                rng = random.Random(1)
                ids = list(range(rows))
                for start in range(0, rows, 50_000):  # created in slices: the parent's memory is not measured
                    chunk = _rows(ids[start : start + 50_000], rng, salt=0)
                    if start == 0:
                        warehouse.append(
                            "Account", chunk, read=None, partition_by=["_sf_bucket"], key="k", state={}, txns={}
                        )
                    else:
                        warehouse.append(
                            "Account",
                            chunk,
                            read=warehouse.table("Account"),
                            partition_by=["_sf_bucket"],
                            key="k",
                            state={},
                            txns={},
                        )
                scan = _peak(root / "warehouse", root / "feed", batch)
                differ = set(rng.sample(ids, max(1, rows // 100)))
                snapshot = pa.concat_tables(
                    _rows(ids[s : s + 50_000], random.Random(1), salt=0) for s in range(0, rows, 50_000)
                )
                names = [
                    ("resynced " if k in differ else "") + n for k, n in enumerate(snapshot["Field0__c"].to_pylist())
                ]
                snapshot = snapshot.set_column(
                    snapshot.schema.get_field_index("Field0__c"), "Field0__c", pa.array(names, pa.string())
                )
                warehouse.overwrite(
                    "Account",
                    pa.RecordBatchReader.from_batches(snapshot.schema, snapshot.to_batches()),
                    read=warehouse.table("Account"),
                    partition_by=["_sf_bucket"],
                    key="k",
                    state={},
                    txns={},
                )
                del snapshot, names
                resync = _peak(root / "warehouse", root / "feed", batch)
                label = f"{batch:,}" if batch == batch_rows else "one pass"
                print(
                    f"{rows:>9,} {label:>10} {scan['records']:>12,} {scan['peak_mb']:>8.0f} {scan['seconds']:>7.1f} "
                    f"{resync['records']:>14,} {resync['peak_mb']:>9.0f} {resync['seconds']:>8.1f}",
                    flush=True,
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.changefeed")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--memory", help="comma-separated table sizes: peak memory of exports (module docstring)")
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument(
        "--no-one-pass",
        action="store_true",
        help="--memory: skip the one-pass exports (they hold the whole resync: about 10 GB at 1,000,000 rows)",
    )
    args = parser.parse_args()
    if args.memory:
        memory([int(n) for n in args.memory.split(",")], args.batch_rows, one_pass=not args.no_one_pass)
        return
    rng = random.Random(1)
    root = Path(tempfile.mkdtemp(prefix="bench-changefeed-"))
    try:
        warehouse = DeltaWarehouse(root=str(root / "warehouse"))

        def merge(data: pa.Table) -> None:
            warehouse.upsert(
                "Account",
                data,
                read=warehouse.table("Account"),
                key_column="Id",
                partition_column="_sf_bucket",
                partition_values=data["_sf_bucket"].to_pylist(),
                key="k",
                state={},
                txns={},
            )

        ids = list(range(args.rows))
        warehouse.append(
            "Account", _rows(ids, rng, salt=0), read=None, partition_by=["_sf_bucket"], key="k", state={}, txns={}
        )
        for fmt in ("json", "debezium_json"):
            feed = ChangefeedConfig(
                uri=str(root / f"feed-{fmt}"), format=fmt, initial_scan=True, max_versions_per_file=args.versions
            )
            _export(warehouse, feed, f"initial scan {args.rows:,} rows ({fmt})")
        per = max(1, args.changes // args.versions)
        for v in range(args.versions):
            changed = rng.sample(ids, per)
            data = _rows(changed, rng, salt=v + 1)
            same = _rows(changed[: per // 10], random.Random(0), salt=0)  # rewritten with the values they had
            merge(pa.concat_tables([data.slice(per // 10), same]))
        for fmt in ("json", "debezium_json"):
            feed = ChangefeedConfig(uri=str(root / f"feed-{fmt}"), format=fmt, max_versions_per_file=args.versions)
            _export(warehouse, feed, f"{args.versions} merges, {per * args.versions:,} rows ({fmt})")
        snapshot = read_table(warehouse.table("Account"))
        differ = set(rng.sample(ids, args.rows // 100))
        names = snapshot["Field0__c"].to_pylist()
        changed_names = [
            f"resynced {n}" if int(i[3:]) in differ else n for i, n in zip(snapshot["Id"].to_pylist(), names)
        ]
        snapshot = snapshot.set_column(
            snapshot.schema.get_field_index("Field0__c"), "Field0__c", pa.array(changed_names, pa.string())
        )
        warehouse.overwrite(
            "Account",
            pa.RecordBatchReader.from_batches(snapshot.schema, snapshot.to_batches()),
            read=warehouse.table("Account"),
            partition_by=["_sf_bucket"],
            key="k",
            state={},
            txns={},
        )
        for fmt in ("json", "debezium_json"):
            feed = ChangefeedConfig(uri=str(root / f"feed-{fmt}"), format=fmt)
            _export(warehouse, feed, f"resync of {args.rows:,}, 1% differ ({fmt})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
