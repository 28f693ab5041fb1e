"""`python -m bench.cluster [--rows N] [--repeat R]`: handing a run's Arrow tables to Spark on a cluster.

A run builds its inputs in the driver as Arrow and hands them to Spark (`resources.spark.from_arrow`). On a
cluster, a large table either travels inside Spark's tasks (`createDataFrame`, then a local checkpoint on the
executors) or is staged as Parquet where the executors read it (`CDC_SPARK_STAGING`, `resources.spark_staging`).
This bench hands the same table of landing-like lines (N rows of ~300 bytes) to Spark R times and runs one
aggregate over it, each way in a process of its own (one Spark session per process), against a standalone master
with two 1-core workers on loopback (`demo.spark_cluster`):

- `local[2]` (the baseline: Spark inside the process, as a run without a cluster);
- cluster, rows in tasks (no staging set);
- cluster, staged Parquet (a shared directory);
- Spark Connect server attached to the cluster, staged Parquet (`make run`'s way on a cluster).

It prints the session start, the first hand-off (with the staging probe, when staged), the median of the others,
and the probe alone. The floor is the same aggregate in pyarrow, in the parent process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from demo import processes
from demo.spark_cluster import start_spark_cluster

REPO = Path(__file__).resolve().parent.parent


def lines(rows: int) -> pa.Table:
    body = "x" * 280
    return pa.table(
        {
            "source_line": pa.array(range(rows), pa.int64()),
            "raw": pa.array([f'{{"line": {i}, "body": "{body}"}}' for i in range(rows)], pa.string()),
        }
    )


def floor_s(table: pa.Table, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        pc.sum(pc.utf8_length(table["raw"])).as_py()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child(rows: int, repeat: int, conf: dict[str, str]) -> dict:
    """In a process of its own: session start, staging probe, R hand-offs with one aggregate each."""
    from dagster_pyspark.resources import spark_session_from_config

    from resources import spark_staging
    from resources.spark import from_arrow, spark_resource

    table = lines(rows)
    start = time.perf_counter()
    spark = spark_session_from_config(spark_resource(conf).spark_config)
    spark.range(1).count()
    session_s = time.perf_counter() - start
    probe_s = None
    if (staging := spark_staging.staging_location()) is not None and os.environ.get(spark_staging.STAGING_ENV):
        start = time.perf_counter()
        spark_staging.prove_shared(spark, staging)
        probe_s = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        total = from_arrow(spark, table).selectExpr("sum(length(raw)) AS n").collect()[0]["n"]
        times.append(time.perf_counter() - start)
    assert total == pc.sum(pc.utf8_length(table["raw"])).as_py()
    return {
        "session_s": session_s,
        "probe_s": probe_s,
        "first_s": times[0],
        "median_s": statistics.median(times[1:] or times),
    }


def _run_child(rows: int, repeat: int, conf: dict[str, str], env: dict[str, str]) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_MASTER", "CDC_SPARK_STAGING")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cluster",
            "--child",
            json.dumps(conf),
            "--rows",
            str(rows),
            "--repeat",
            str(repeat),
        ],
        env=base | env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(rows: int, repeat: int) -> list[dict]:
    table = lines(rows)
    print(
        f"table: {rows:,} rows, {table.nbytes / 2**20:.1f} MiB of Arrow; floor (pyarrow aggregate) "
        f"{floor_s(table, repeat) * 1000:.1f} ms"
    )
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    small = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.driver.memory": "1g"}
    results = [{"way": "local[2]", **_run_child(rows, repeat, small | {"spark.master": "local[2]"}, {})}]
    cluster = start_spark_cluster(root / "cluster", workers=2)
    try:
        on_cluster = small | cluster.client_conf()
        results.append({"way": "cluster, rows in tasks", **_run_child(rows, repeat, on_cluster, {})})
        results.append(
            {
                "way": "cluster, staged Parquet",
                **_run_child(rows, repeat, on_cluster, {"CDC_SPARK_STAGING": str(root / "staging")}),
            }
        )
        server, url = processes.start_spark_connect(root / "spark_connect.log", conf=on_cluster)
        try:
            results.append(
                {
                    "way": "Connect server on the cluster, staged Parquet",
                    **_run_child(rows, repeat, {}, {"SPARK_REMOTE": url, "CDC_SPARK_STAGING": str(root / "staging")}),
                }
            )
        finally:
            processes.stop(server)
    finally:
        cluster.stop()
    baseline = results[0]["median_s"]
    for r in results:
        r["x_local"] = r["median_s"] / baseline
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.rows, args.repeat, json.loads(args.child))))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    rows = run(args.rows, args.repeat)
    print("way | session s | probe s | first hand-off s | median hand-off s | x local[2]")
    for r in rows:
        probe = "-" if r["probe_s"] is None else f"{r['probe_s']:.2f}"
        print(
            f"{r['way']} | {r['session_s']:.1f} | {probe} | {r['first_s']:.2f} | {r['median_s']:.2f} | "
            f"{r['x_local']:.2f}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
