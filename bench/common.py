"""What every benchmark workload shares: the Spark session, the platform wired to a work directory, Dagster's real
`materialize()`, per-phase timings from materialization metadata, and per-workload peak memory.

Several workloads run in one process (`python -m bench`), so peak RSS is reset before each one (`clear_refs`),
and the figure is the peak of this process plus its children (the Spark driver JVM) during that workload only.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import yaml

from cdc_assets.names import replica_key
from definitions import build_defs
from resources.spark import spark_config

BENCH_SPARK = {"spark.sql.shuffle.partitions": "8", "spark.ui.showConsoleProgress": "false"}


def process_tree(root: int | None = None) -> dict[str, dict[str, str]]:
    """`/proc/<pid>/status` fields of `root` (default: this process) and every process under it (a Spark driver JVM,
    a Spark Connect server and its JVM; under a daemon, its code server and run workers)."""
    status: dict[str, dict[str, str]] = {}
    for path in Path("/proc").glob("[0-9]*/status"):
        try:
            status[path.parent.name] = dict(
                line.split(":\t", 1) for line in path.read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue
    tree, grew = {str(root or os.getpid())}, True
    while grew:
        below = {pid for pid, f in status.items() if f.get("PPid", "").strip() in tree} - tree
        tree |= below
        grew = bool(below)
    return {pid: status[pid] for pid in tree if pid in status}


def cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and every process under it: utime + stime + cutime + cstime of each (/proc/<pid>/stat),
    so a child that ended counts too, in the time of the parent that reaped it."""
    ticks = 0
    for pid in process_tree(root):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # it ended meanwhile: its time is in its parent's cutime once reaped
        ticks += sum(int(f) for f in stat[stat.rindex(")") + 2 :].split()[11:15])  # fields 14-17
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all the machine's cores since boot (/proc/stat; idle and iowait are not busy)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def peak_rss_mb(exclude: set[int] | None = None) -> float:
    """Peak resident memory (VmHWM) of this process plus every process under it still running, in MB; `exclude`:
    processes (and those under them) that are not ours to count, e.g. an emulator the benchmark started."""
    tree = process_tree()
    skipped, grew = {str(p) for p in exclude or ()}, True
    while grew:
        below = {pid for pid, f in tree.items() if f.get("PPid", "").strip() in skipped} - skipped
        skipped |= below
        grew = bool(below)
    return sum(int(f.get("VmHWM", "0 kB").split()[0]) for pid, f in tree.items() if pid not in skipped) / 1024


def reset_peak_rss() -> None:
    """Start a new peak-RSS measurement for this process and those under it (Linux `clear_refs` 5)."""
    for pid in process_tree():
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


def start_spark() -> tuple[dict[str, str], float]:
    """The Spark conf the platform will use, with its session already started; and the start time (0 if reused)."""
    from dagster_pyspark.resources import spark_session_from_config
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import is_remote

    conf = spark_config(BENCH_SPARK)
    if SparkSession.getActiveSession() is not None:
        return conf, 0.0
    started = time.perf_counter()
    spark = spark_session_from_config(conf)
    if not is_remote():
        spark.sparkContext.setLogLevel("ERROR")
    return conf, time.perf_counter() - started


def write_replication(path: Path, objects: dict[str, Path | None], *, initial_load: bool = False, **options) -> Path:
    """A replication.yaml naming `objects` (with describe files where given), transactions closed at once;
    `options`: more of its `options` (e.g. history=True)."""
    path.write_text(
        yaml.safe_dump(
            {
                "options": {"transaction_close_after": 0, "initial_load": initial_load, **options},
                "objects": [{"name": o, **({"describe": str(d)} if d else {})} for o, d in objects.items()],
            }
        )
    )
    return path


class PlatformRunner:
    """The platform's Definitions over one landing zone and warehouse; `run()` is one `materialize()` of
    change_events + the replicas, in this process, reusing the Spark session (as the in-process executor does)."""

    def __init__(self, *, config: Path, landing: Path, warehouse: Path, spark_conf: dict[str, str], salesforce=None):
        self.warehouse = warehouse
        self.defs = build_defs(
            config_path=config,
            landing_path=str(landing),
            warehouse_root=str(warehouse),
            spark_conf=spark_conf,
            salesforce=salesforce,
        )
        self.assets = [a for a in self.defs.assets if isinstance(a, dg.AssetsDefinition)]
        self.instance = dg.DagsterInstance.ephemeral()

    def run(self, selection: list[dg.AssetKey] | None = None) -> tuple[float, dict[str, float], dict[str, dict]]:
        """Wall seconds, summed per-phase seconds (`ingest.*`, `apply.*`), and each asset's metadata values."""
        assets = [a for a in self.assets if selection is None or set(a.keys) & set(selection)]
        started = time.perf_counter()
        result = dg.materialize(assets, resources=self.defs.resources, instance=self.instance)
        wall = time.perf_counter() - started
        phases: dict[str, float] = defaultdict(float)
        metadata: dict[str, dict] = {}
        for event in result.get_asset_materialization_events():
            m = event.materialization
            where = "ingest" if m.asset_key == dg.AssetKey("change_events") else "apply"
            values = {k: v.value for k, v in m.metadata.items()}
            metadata[m.asset_key.to_user_string()] = values
            for key, value in values.items():
                if key.startswith("seconds_"):
                    phases[f"{where}.{key[len('seconds_') :]}"] += float(value)
        return wall, dict(phases), metadata


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def figures(
    *,
    workload: str,
    unit: str,
    count: int,
    wall_s: float,
    floor_s: float | None = None,
    baseline_s: float | None = None,
    **extra,
) -> dict:
    """One result row: throughput in `unit`/s; `x_floor` = our wall / the floor's (how far above the floor),
    `x_baseline` = the baseline's wall / ours (how much faster than the baseline), as in the catch-up figures."""
    return {
        "workload": workload,
        "unit": unit,
        "count": count,
        "wall_s": wall_s,
        "per_s": count / wall_s if wall_s else float("nan"),
        "floor_s": floor_s,
        "x_floor": wall_s / floor_s if floor_s else None,
        "baseline_s": baseline_s,
        "x_baseline": baseline_s / wall_s if baseline_s and wall_s else None,
        "peak_rss_mb": peak_rss_mb(),
        **extra,
    }


def bulk_floor(salesforce, name: str, fields: list[str], out: Path, **query) -> float:
    """Seconds to read a Bulk API 2.0 query of `fields` page by page with the platform's client and CSV parser and
    write it as Parquet (no typing, no merge): the floor of a load or refresh of that query. `query`: more
    `bulk_query_all` arguments (include_deleted, parallel_pages)."""
    started = time.perf_counter()
    writer = None
    for batch in salesforce.bulk_query_all(name, fields, **query):
        writer = writer or pq.ParquetWriter(out, batch.schema)
        writer.write_batch(batch)
    if writer:
        writer.close()
    return time.perf_counter() - started


def one_object_defs(work: Path, conf: dict, salesforce, sobject: dict) -> dg.Definitions:
    """The platform over `work` replicating the one object `sobject` (its replication.yaml entry), loaded at once."""
    config = work / "replication.yaml"
    config.write_text(
        yaml.safe_dump({"options": {"transaction_close_after": 0, "initial_load": True}, "objects": [sobject]})
    )
    return build_defs(
        config_path=config,
        landing_path=str(work / "landing"),
        warehouse_root=str(work / "wh"),
        spark_conf=conf,
        salesforce=salesforce,
    )


def materialize_replica(
    defs: dg.Definitions, instance: dg.DagsterInstance, emu, name: str, **config
) -> tuple[float, int, dict]:
    """One `materialize()` of the replica of `name` with the op `config`: wall seconds, HTTP requests the org
    served, and the materialization's metadata."""
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and replica_key(name) in a.keys]
    ops = {replica_key(name).to_python_identifier(): {"config": config}} if config else {}
    emu.reset_request_counts()
    started = time.perf_counter()
    result = dg.materialize(assets, resources=defs.resources, instance=instance, run_config={"ops": ops})
    wall = time.perf_counter() - started
    [event] = result.get_asset_materialization_events()
    return wall, sum(emu.request_counts().values()), {k: v.value for k, v in event.materialization.metadata.items()}
