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
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.common import PlatformRunner, peak_rss_mb, reset_peak_rss, start_spark, write_replication
from bench.naive import NaiveTable
from bench.workloads import OBJECTS, cdc_workload, events_in


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


def run(*, accounts: int = 10_000, changes: int = 300_000) -> list[dict]:
    root = cdc_workload(f"catchup-{accounts}-{changes}", accounts=accounts, changes=changes)
    reset_peak_rss()
    conf, spark_start = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    try:
        config = write_replication(work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS})
        platform = PlatformRunner(config=config, landing=root / "landing", warehouse=work / "wh", spark_conf=conf)
        wall, phases, metadata = platform.run()
        peak = peak_rss_mb()
        rows = {o: DeltaTable(str(work / "wh" / o)).count() for o in OBJECTS}
        floor = floor_pass(root, work)
        naive_events, naive_seconds = naive_pass(root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    events = int(metadata["change_events"]["events_parsed"])
    naive_rate = naive_events / naive_seconds
    ours_rate = events / wall
    return [{
        "workload": f"catch-up {events:,} events ({events_in(root):,} lines), 5 objects, {sum(rows.values()):,} records",
        "events": events, "spark_start_s": spark_start, "wall_s": wall, "events_per_s": ours_rate, "floor_s": floor,
        "x_floor": wall / floor, "naive_events_per_s": naive_rate, "x_naive": ours_rate / naive_rate,
        "peak_rss_mb": peak, "phases": phases, "rows": rows,
    }]
