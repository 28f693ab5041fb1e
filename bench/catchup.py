"""Catch-up benchmark: a backlog of CDC events through Dagster's real materialize(), against two references
measured in the same run:

- **floor**: read the same landing files with pyarrow and write the final replica rows as Parquet (no logic);
- **naive**: Salesforce's guidance taken literally: one Delta merge per transaction, row by row in Python
  (measured on the first transactions, reported as throughput).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

from bench.common import peak_rss_mb
from bench.naive import NaiveTable
from bench.workloads import OBJECTS, cdc_workload, events_in
from cdc_assets.assets import replica_key
from cdc_assets.defs import build_defs
from resources.spark import spark_config


def platform_pass(root: Path, work: Path, spark_conf: dict) -> dict:
    config = work / "replication.yaml"
    config.write_text(yaml.safe_dump({
        "options": {"transaction_close_after": 0, "initial_load": False},
        "objects": [{"name": o, "describe": str(root / "describe" / f"{o}.json")} for o in OBJECTS],
    }))
    defs = build_defs(config_path=config, landing_path=str(root / "landing"), warehouse_root=str(work / "wh"),
                      spark_conf=spark_conf)
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    instance = dg.DagsterInstance.ephemeral()
    started = time.perf_counter()
    result = dg.materialize(assets, resources=defs.resources, instance=instance)
    wall = time.perf_counter() - started
    phases: dict[str, float] = defaultdict(float)
    for mat in result.get_asset_materialization_events():
        m = mat.materialization
        where = "ingest" if m.asset_key == dg.AssetKey("change_events") else "apply"
        for key, value in m.metadata.items():
            if key.startswith("seconds_"):
                phases[f"{where}.{key[len('seconds_'):]}"] += float(value.value)
    return {"wall": wall, "phases": dict(phases), "rows": {
        o: DeltaTable(str(work / "wh" / o)).count() for o in OBJECTS if (work / "wh" / o / "_delta_log").exists()}}


_HEADER = pa.struct([("entityName", pa.string()), ("recordIds", pa.list_(pa.string())),
                     ("changeType", pa.string()), ("transactionKey", pa.string()),
                     ("sequenceNumber", pa.int64()), ("commitTimestamp", pa.int64())])
_LINE = pa.schema([("data", pa.struct([("payload", pa.struct([("ChangeEventHeader", _HEADER)])),
                                       ("event", pa.struct([("replayId", pa.int64())]))]))])


def floor_pass(root: Path, work: Path) -> float:
    """pyarrow reads every landing line (headers typed, bodies skipped), then writes the final rows as Parquet."""
    options = pajson.ParseOptions(explicit_schema=_LINE, unexpected_field_behavior="ignore")
    started = time.perf_counter()
    for f in sorted((root / "landing").rglob("*.jsonl")):
        pajson.read_json(f, parse_options=options)
    final = json.loads((root / "final.json").read_text())
    for obj, rows in final.items():
        pq.write_table(pa.Table.from_pylist(rows), work / f"{obj}.parquet")
    return time.perf_counter() - started


def naive_pass(root: Path, work: Path, seconds: float = 20.0) -> tuple[int, float]:
    """One delta-rs merge per transaction (Python fold of each event); returns (events applied, elapsed)."""
    return NaiveTable(work / "naive").apply(sorted((root / "landing").rglob("*.jsonl")), seconds=seconds)


def run(*, accounts: int = 2500, changes: int = 40_000) -> list[dict]:
    from dagster_pyspark.resources import spark_session_from_config

    root = cdc_workload(f"catchup-{accounts}-{changes}", accounts=accounts, changes=changes)
    events = events_in(root)
    conf = spark_config({"spark.sql.shuffle.partitions": "8"})
    started = time.perf_counter()
    spark = spark_session_from_config(conf)
    spark_start = time.perf_counter() - started
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    try:
        ours = platform_pass(root, work, conf)
        floor = floor_pass(root, work)
        naive_events, naive_seconds = naive_pass(root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    naive_rate = naive_events / naive_seconds
    ours_rate = events / ours["wall"]
    return [{
        "workload": f"catch-up {events:,} events, 5 objects", "events": events, "spark_start_s": spark_start,
        "wall_s": ours["wall"], "events_per_s": ours_rate, "floor_s": floor, "x_floor": ours["wall"] / floor,
        "naive_events_per_s": naive_rate, "x_naive": ours_rate / naive_rate, "peak_rss_mb": peak_rss_mb(),
        "phases": ours["phases"], "rows": ours["rows"],
    }]
