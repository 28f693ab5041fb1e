"""Catch-up benchmark: a backlog of CDC events through Dagster's real materialize(), against references measured
in the same run:

- **floor (headers)**: pyarrow reads the landing files, typing only each line's header (bodies skipped), and the
  final replica rows are written as Parquet (no logic);
- **full floor**: pyarrow parses every line with its body (each entity's lines with the schema pyarrow infers for
  them), and the final rows are written as Parquet: what reading everything costs, with no typing checks, dedup or
  fold;
- **naive**: Salesforce's guidance taken literally: one Delta merge per transaction, row by row in Python
  (measured on the first transactions, reported as throughput).

`python -m bench.catchup [--accounts N] [--changes N]` runs it at any size (`python -m bench catchup` at the
standard ones).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.common import PlatformRunner, peak_rss_mb, reset_peak_rss, start_spark, write_replication
from bench.naive import NaiveTable
from bench.workloads import OBJECTS, cdc_workload, events_in

_HEADER = pa.struct(
    [
        ("entityName", pa.string()),
        ("recordIds", pa.list_(pa.string())),
        ("changeType", pa.string()),
        ("transactionKey", pa.string()),
        ("sequenceNumber", pa.int64()),
        ("commitTimestamp", pa.int64()),
    ]
)
_LINE = pa.schema(
    [
        (
            "data",
            pa.struct(
                [
                    ("payload", pa.struct([("ChangeEventHeader", _HEADER)])),
                    ("event", pa.struct([("replayId", pa.int64())])),
                ]
            ),
        )
    ]
)


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


_ENTITY = r'"entityName":"(?P<entity>[A-Za-z0-9_]+)"'
# A person-account org's Account.Name is text for a business account and an object for a person: the two shapes
# cannot share an inferred column, so such lines are a group of their own.
_OBJECT_NAME = '"Name":{'


def full_floor_pass(root: Path, work: Path) -> float:
    """pyarrow splits the landing lines (vectorized), groups them by entity, parses every group's lines with their
    bodies (schema inferred), then writes the final rows as Parquet."""
    started = time.perf_counter()
    for f in sorted((root / "landing").rglob("*.jsonl")):
        lines = pc.list_flatten(pc.split_pattern(pa.array([f.read_text()]), "\n"))
        lines = lines.filter(pc.greater(pc.binary_length(lines), 0))
        entity = pc.struct_field(pc.extract_regex(lines, _ENTITY), [0])
        shape = pc.binary_join_element_wise(entity, pc.cast(pc.match_substring(lines, _OBJECT_NAME), pa.string()), "/")
        for group in pc.unique(shape).to_pylist():
            chosen = lines.filter(pc.equal(shape, group))
            joined = pc.binary_join(pa.ListArray.from_arrays([0, len(chosen)], chosen), "\n")[0].as_buffer()
            pajson.read_json(pa.BufferReader(joined), read_options=pajson.ReadOptions(block_size=1 << 26))
    final = json.loads((root / "final.json").read_text())
    for obj, rows in final.items():
        pq.write_table(pa.Table.from_pylist(rows), work / f"{obj}.parquet")
    return time.perf_counter() - started


def naive_pass(root: Path, work: Path, seconds: float = 20.0) -> tuple[int, float]:
    """One delta-rs merge per transaction (Python fold of each event); returns (events applied, elapsed)."""
    return NaiveTable(work / "naive").apply(sorted((root / "landing").rglob("*.jsonl")), seconds=seconds)


def platform_over(root: Path, work: Path, conf: dict[str, str]) -> PlatformRunner:
    """The platform over the generated workload `root` (its landing zone and describe files), warehouse in `work`."""
    config = write_replication(work / "replication.yaml", {o: root / "describe" / f"{o}.json" for o in OBJECTS})
    return PlatformRunner(config=config, landing=root / "landing", warehouse=work / "wh", spark_conf=conf)


def run(*, accounts: int = 10_000, changes: int = 300_000) -> list[dict]:
    root = cdc_workload(f"catchup-{accounts}-{changes}", accounts=accounts, changes=changes)
    reset_peak_rss()
    conf, spark_start = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    try:
        wall, phases, metadata = platform_over(root, work, conf).run()
        peak = peak_rss_mb()
        rows = {o: DeltaTable(str(work / "wh" / o)).count() for o in OBJECTS}
        floor = floor_pass(root, work)
        full_floor = full_floor_pass(root, work)
        naive_events, naive_seconds = naive_pass(root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    events = int(metadata["change_events"]["events_parsed"])
    naive_rate = naive_events / naive_seconds
    ours_rate = events / wall
    return [
        {
            "workload": f"catch-up {events:,} events ({events_in(root):,} lines), 5 objects, {sum(rows.values()):,} records",
            "events": events,
            "spark_start_s": spark_start,
            "wall_s": wall,
            "events_per_s": ours_rate,
            "floor_s": floor,
            "x_floor": wall / floor,
            "full_floor_s": full_floor,
            "x_full_floor": wall / full_floor,
            "naive_events_per_s": naive_rate,
            "x_naive": ours_rate / naive_rate,
            "peak_rss_mb": peak,
            "phases": phases,
            "rows": rows,
        }
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.catchup", description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=10_000, help="accounts in the generated org")
    parser.add_argument("--changes", type=int, default=300_000, help="transactions of the workload")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for row in run(accounts=args.accounts, changes=args.changes):
        print(json.dumps(row, default=str, indent=1))
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
