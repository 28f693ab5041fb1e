"""Wide object: a custom object with 300 replica columns through the catch-up path (parse, dedup, fold, merge
of 300 typed columns), against the same references as catch-up, measured in the same run:

- **floor**: pyarrow reads every landing line, bodies included (300 fields inferred), and writes the final rows
  as Parquet;
- **naive**: one delta-rs merge per transaction (measured for up to 20 s, reported as throughput).

The object, `Wide__c`, is declared with the emulator's schema machinery (one `Field` per column: 293 custom
fields cycling through every replicated type, plus Id, Name, owner and audit fields) and registered before the
org is created, so its describe(), storage, validation and CDC events are the emulator's own. The org gets
`records` creates (transactions of 50, every field set) then `updates` transactions changing 1-5 fields of
1-5 records each; generated once into `bench/out/wide-<records>-<updates>/`.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from bench.common import PlatformRunner, figures, peak_rss_mb, reset_peak_rss, start_spark, write_replication
from bench.naive import NaiveTable
from bench.workloads import OUT, count_lines
from salesforce_emulator import Emulator, schema
from salesforce_emulator.schema import Field, SObject

OBJECT = "Wide__c"
CUSTOM_FIELDS = 293  # + Id, Name, OwnerId and 4 audit fields = 300 replica columns
TYPES = [
    "string",
    "double",
    "int",
    "boolean",
    "date",
    "datetime",
    "picklist",
    "textarea",
    "currency",
    "percent",
    "email",
    "phone",
    "url",
]


def wide_object() -> SObject:
    """`Wide__c`, registered with the emulator's object tables (idempotent)."""
    if (obj := schema.get_object(OBJECT)) is not None:
        return obj
    custom = tuple(
        Field(f"F{n:03d}_{t.capitalize()}__c", t, length=255 if t in ("string", "textarea") else None)
        for n, t in ((n, TYPES[n % len(TYPES)]) for n in range(CUSTOM_FIELDS))
    )
    obj = SObject(
        OBJECT,
        "a01",
        (
            Field("Id", "id", nillable=False, length=18, updateable=False),
            Field("IsDeleted", "boolean", nillable=False, updateable=False, default=0),
            Field("Name", "string", nillable=False, length=80),
            *custom,
            Field("OwnerId", "reference", nillable=False, length=18),
            Field("CreatedDate", "datetime", nillable=False, updateable=False),
            Field("CreatedById", "reference", nillable=False, length=18, updateable=False),
            Field("LastModifiedDate", "datetime", nillable=False, updateable=False),
            Field("LastModifiedById", "reference", nillable=False, length=18, updateable=False),
            Field("SystemModstamp", "datetime", nillable=False, updateable=False),
        ),
    )
    schema.OBJECTS[OBJECT] = obj
    schema._LOWER[OBJECT.lower()] = obj
    schema.BY_PREFIX[obj.key_prefix] = obj
    return obj


def _value(rng: random.Random, kind: str):
    day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return {
        "double": lambda: round(rng.random() * 1000, 3),
        "currency": lambda: round(rng.random() * 1e6, 2),
        "percent": lambda: round(rng.random() * 100, 1),
        "int": lambda: rng.randint(0, 100_000),
        "boolean": lambda: rng.random() < 0.5,
        "date": lambda: day,
        "datetime": lambda: f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00.000Z",
        "picklist": lambda: rng.choice(["Red", "Green", "Blue", "Amber"]),
        "email": lambda: f"user{rng.randint(0, 9999)}@example.com",
        "phone": lambda: f"+1 555 {rng.randint(0, 9999):04d}",
        "url": lambda: f"https://example.com/{rng.randint(0, 9999)}",
        "textarea": lambda: " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(8)),
    }.get(kind, lambda: f"value {rng.randint(0, 1_000_000)}")()


def workload(records: int, updates: int, seed: int = 3) -> Path:
    root = OUT / f"wide-{records}-{updates}"
    if (root / "done.json").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    obj = wide_object()
    custom = [f for f in obj.fields if f.name.endswith("__c")]
    rng = random.Random(seed)
    emu = Emulator(root / "org", landing_dir=root / "landing", roll_seconds=3600)
    try:
        created: list[str] = []
        for start in range(0, records, 50):
            with emu.store.transaction() as txn:
                for n in range(start, min(records, start + 50)):
                    values = {f.name: _value(rng, f.type) for f in custom}
                    created.append(txn.create(OBJECT, {"Name": f"Wide {n}", **values}))
        for _ in range(updates):
            with emu.store.transaction() as txn:
                for rid in rng.sample(created, rng.randint(1, 5)):
                    fields = rng.sample(custom, rng.randint(1, 5))
                    txn.update(
                        OBJECT, rid, {f.name: None if rng.random() < 0.1 else _value(rng, f.type) for f in fields}
                    )
        emu.flush_cdc()
        (root / "describe.json").write_text(json.dumps(emu.store.describe(OBJECT)))
        (root / "final.json").write_text(json.dumps(emu.store.snapshot(OBJECT)))
    finally:
        emu.stop()
    (root / "done.json").write_text(json.dumps({"events": count_lines(root / "landing")}))
    return root


def floor_pass(root: Path, work: Path) -> float:
    """pyarrow reads every line in full (300 fields of bodies typed by inference), writes the final rows."""
    started = time.perf_counter()
    for f in sorted((root / "landing").rglob("*.jsonl")):
        pajson.read_json(f, read_options=pajson.ReadOptions(block_size=64 << 20))
    rows = json.loads((root / "final.json").read_text())
    pq.write_table(pa.Table.from_pylist(rows), work / "final.parquet")
    return time.perf_counter() - started


def run(*, records: int = 5_000, updates: int = 20_000) -> list[dict]:
    wide_object()
    root = workload(records, updates)
    events = json.loads((root / "done.json").read_text())["events"]
    reset_peak_rss()
    conf, spark_start = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-wide-"))
    try:
        config = write_replication(work / "replication.yaml", {OBJECT: root / "describe.json"})
        platform = PlatformRunner(config=config, landing=root / "landing", warehouse=work / "wh", spark_conf=conf)
        wall, phases, metadata = platform.run()
        peak = peak_rss_mb()
        floor = floor_pass(root, work)
        naive_events, naive_s = NaiveTable(work / "naive").apply(
            sorted((root / "landing").rglob("*.jsonl")), seconds=20.0
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    columns = len(json.loads((root / "describe.json").read_text())["fields"]) - 2  # minus IsDeleted, SystemModstamp
    rows = metadata[f"salesforce/{OBJECT}"].get("dagster/row_count")
    return [
        figures(
            workload=f"wide object: {columns} columns, {records:,} records + {updates:,} update txns",
            unit="events",
            count=events,
            wall_s=wall,
            floor_s=floor,
            baseline_s=events / (naive_events / naive_s),
            naive_events_per_s=naive_events / naive_s,
            spark_start_s=spark_start,
            columns=columns,
            rows=rows,
            phases=phases,
        )
        | {"peak_rss_mb": peak}
    ]
