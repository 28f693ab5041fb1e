"""Merge scaling: 10,000 changes applied to a small and to a large Account replica (docs/design/contract.md §8: merge
cost must follow the size of the change, not of the table).

Each replica is built directly with delta-rs in the platform's layout: Salesforce-like 18-character ids whose 12
base-62 digits count up in creation order (as `salesforce_emulator.ids` makes them), partitioned by `_sf_bucket`,
the first 13 characters (3,844 consecutive records a partition). Then 10,000 UPDATE events (100 transactions of
100, made by the emulator's CDC event builder) are landed and applied by one `materialize()` of change_events +
the replica: the platform's real apply path (after a warm-up run of 1,000 changes, not measured, so that
Spark's generated code is compiled). Two change patterns:

- **recent**: the changes hit records among the newest 100,000 (recently created records are the ones that
  change; the layout is built on that locality);
- **uniform**: the changes hit records anywhere in the table (the worst case for this layout).

Same run, same changes: **floor** = writing the 10,000 changed rows as Parquet; **baseline** = one delta-rs
merge of those rows by `Id` alone (no partition literals: delta-rs can only prune files by the range of the
source's ids). For each merge the Delta log says how many files and bytes it rewrote.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from bench.common import PlatformRunner, figures, peak_rss_mb, reset_peak_rss, start_spark, write_replication
from bench.workloads import OUT
from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP
from replication.state import ReplicaState
from resources.delta import DeltaWarehouse, read_table
from salesforce_emulator import ids
from salesforce_emulator.cdc import change_event, event_line
from salesforce_emulator.changes import Change, CommittedTransaction
from salesforce_emulator.schema import ACCOUNT
from salesforce_emulator.values import ms_to_iso

CHANGES = 10_000
RECENT = 100_000
TX_SIZE = 100
WARM_UP = 1_000
BUILD_CHUNK = 1_000_000
SCHEMA = ObjectSchema.from_describe(ACCOUNT.describe())
USER = ids.make_id("005", 1)
CREATED = datetime(2025, 1, 1, tzinfo=UTC)

_ALPHABET = np.frombuffer(ids.BASE62.encode(), np.uint8)
_SUFFIX = np.frombuffer(ids._SUFFIX_ALPHABET.encode(), np.uint8)


def make_ids(prefix: str, start: int, count: int) -> pa.Array:
    """`ids.make_id(prefix, n)` for n in [start, start + count), vectorised."""
    seq = np.arange(start, start + count, dtype=np.int64)
    chars = np.empty((count, 18), np.uint8)
    chars[:, :3] = np.frombuffer(prefix.encode(), np.uint8)
    for pos in range(14, 2, -1):
        chars[:, pos] = _ALPHABET[seq % 62]
        seq //= 62
    upper = (chars[:, :15] >= ord("A")) & (chars[:, :15] <= ord("Z"))
    weights = 1 << np.arange(5)
    for chunk in range(3):
        chars[:, 15 + chunk] = _SUFFIX[(upper[:, chunk * 5 : chunk * 5 + 5] * weights).sum(axis=1)]
    return pa.array(chars.view("S18").ravel().astype("U18"))


def _pool(rng: np.random.Generator, values: list[str], count: int) -> pa.Array:
    return pa.array(values).take(pa.array(rng.integers(0, len(values), count)))


def account_rows(start: int, count: int, rng: np.random.Generator) -> pa.Table:
    """`count` snapshot rows of Accounts numbered from `start` (created one second apart), replica-typed."""
    record_ids = make_ids(ACCOUNT.key_prefix, start, count)
    seconds = pa.array(np.arange(start, start + count, dtype=np.int64) * 1_000_000, pa.duration("us"))
    created = pc.add(pa.scalar(CREATED, pa.timestamp("us", tz="UTC")), seconds)
    cities = ["Lyon", "Austin", "Osaka", "Porto", "Leeds", "Graz", "Quito", "Perth"]
    values = {
        "Id": record_ids,
        "Name": pc.binary_join_element_wise("Account ", record_ids, ""),
        "Type": _pool(rng, ["Customer", "Prospect", "Partner"], count),
        "Industry": _pool(rng, ["Energy", "Retail", "Banking", "Media", "Biotech"], count),
        "AnnualRevenue": pa.array(rng.random(count) * 1e7),
        "NumberOfEmployees": pa.array(rng.integers(1, 5000, count)),
        "Rating": _pool(rng, ["Hot", "Warm", "Cold"], count),
        "Phone": _pool(rng, [f"+1 555 {i:04d}" for i in range(1000)], count),
        "BillingStreet": _pool(rng, [f"{i} Main St" for i in range(500)], count),
        "BillingCity": _pool(rng, cities, count),
        "BillingCountry": _pool(rng, ["FR", "US", "JP", "PT", "UK", "AT", "EC", "AU"], count),
        "BillingLatitude": pa.array(rng.random(count) * 90),
        "BillingLongitude": pa.array(rng.random(count) * 180),
        "ShippingCity": _pool(rng, cities, count),
        "OwnerId": pa.repeat(USER, count),
        "CreatedById": pa.repeat(USER, count),
        "LastModifiedById": pa.repeat(USER, count),
        "CreatedDate": created,
        "LastModifiedDate": created,
        "_sf_commit_ts": created,
        "_sf_deleted": pa.repeat(False, count),
        "_sf_source": pa.repeat("snapshot", count),
        "_sf_synced_at": pa.repeat(pa.scalar(CREATED, pa.timestamp("us", tz="UTC")), count),
        BUCKET_COLUMN: pc.utf8_slice_codeunits(record_ids, 0, SCHEMA.bucket_chars),
    }
    target = SCHEMA.arrow_schema()
    return pa.Table.from_arrays(
        [values[f.name].cast(f.type) if f.name in values else pa.nulls(count, f.type) for f in target], schema=target
    )


def build_replica(rows: int) -> Path:
    """An Account replica of `rows` records in the platform's layout, built once into bench/out."""
    root = OUT / f"merge-replica-{rows}"
    if (root / "_delta_log").exists() and (root.parent / f"{root.name}.done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(rows)
    warehouse = DeltaWarehouse(root=str(root.parent))
    for version, start in enumerate(range(1, rows + 1, BUILD_CHUNK)):
        state = ReplicaState()
        write_deltalake(
            str(root),
            account_rows(start, min(BUILD_CHUNK, rows + 1 - start), rng),
            mode="append",
            partition_by=[BUCKET_COLUMN],
            commit_properties=warehouse.properties(state.KEY, state.to_dict(), {APPLY_APP: 0}, version=version),
        )
    DeltaTable(str(root)).optimize.compact()  # one file per partition, as a resync writes it
    (root.parent / f"{root.name}.done").touch()
    return root


def change_lines(record_ids: list[str], *, first_commit: int, commit_ts_ms: int) -> list[str]:
    """One UPDATE event per id (Phone and Rating changed), in transactions of TX_SIZE, as the org emits them."""
    lines, replay = [], 1
    for tx in range(0, len(record_ids), TX_SIZE):
        changes = []
        for rid in record_ids[tx : tx + TX_SIZE]:
            values = {
                "Phone": f"+1 555 {random.randrange(10_000):04d}",
                "Rating": "Hot",
                "LastModifiedDate": ms_to_iso(commit_ts_ms),
            }
            changes.append(Change("Account", "UPDATE", [rid], values, replay_id=replay))
            replay += 1
        txn = CommittedTransaction(
            key=f"bench-{first_commit}-{tx}",
            commit_ts=commit_ts_ms,
            commit_number=first_commit + tx,
            user_id=USER,
            origin="bench",
            changes=changes,
        )
        lines += [event_line(change_event(txn, c, n)) for n, c in enumerate(changes, start=1)]
        commit_ts_ms += 1
    return lines


def rewritten(table: DeltaTable, version: int) -> dict:
    """Files and bytes the commit at `version` removed and added, and the whole table's, from the Delta log."""

    def files(v: int) -> dict[str, int]:
        actions = DeltaTable(table.table_uri, version=v).get_add_actions(flatten=True)
        actions = pa.table(actions)
        return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist()))

    before, after = files(version - 1), files(version)
    removed = {p: s for p, s in before.items() if p not in after}
    added = {p: s for p, s in after.items() if p not in before}
    metrics = table.history(1)[0].get("operationMetrics", {})
    return {
        "files_rewritten": len(removed),
        "bytes_rewritten": sum(removed.values()),
        "files_added": len(added),
        "bytes_added": sum(added.values()),
        "rows_copied": int(metrics.get("num_target_rows_copied", -1)),
        "table_files": len(after),
        "table_bytes": sum(after.values()),
    }


def one_size(rows: int, work: Path, conf: dict, rng: random.Random) -> list[dict]:
    table_dir = work / "wh" / "Account"
    shutil.copytree(build_replica(rows), table_dir)
    landing = work / "landing"
    landing.mkdir(exist_ok=True)
    describe = work / "Account.json"
    describe.write_text(json.dumps(ACCOUNT.describe()))
    config = write_replication(work / "replication.yaml", {"Account": describe})
    platform = PlatformRunner(config=config, landing=landing, warehouse=work / "wh", spark_conf=conf)
    out = []
    commit = 20_000_000_000
    for pattern in ("warm-up", "recent", "uniform"):
        lo = max(1, rows - RECENT + 1) if pattern != "uniform" else 1
        chosen = sorted(rng.sample(range(lo, rows + 1), CHANGES if pattern != "warm-up" else WARM_UP))
        record_ids = [ids.make_id(ACCOUNT.key_prefix, n) for n in chosen]
        now_ms = int(time.time() * 1000)
        (landing / f"{now_ms:013d}-{pattern}.jsonl").write_text(
            "\n".join(change_lines(record_ids, first_commit=commit, commit_ts_ms=now_ms)) + "\n"
        )
        commit += CHANGES
        reset_peak_rss()
        wall, phases, metadata = platform.run()
        ours = rewritten(DeltaTable(str(table_dir)), DeltaTable(str(table_dir)).version())
        if pattern == "warm-up":  # the first run of a session compiles Spark's generated code: not measured
            continue
        applied = metadata["salesforce/Account"]["applied"]
        replica_s = sum(v for k, v in phases.items() if k.startswith("apply."))
        peak = peak_rss_mb()

        table = DeltaTable(str(table_dir))
        buckets = sorted({i[: SCHEMA.bucket_chars] for i in record_ids})
        changed = read_table(table, prune=[(BUCKET_COLUMN, "in", buckets)], filter=pc.field("Id").isin(record_ids))
        started = time.perf_counter()
        pq.write_table(changed, work / f"floor-{pattern}.parquet")
        floor = time.perf_counter() - started
        started = time.perf_counter()
        table.merge(
            changed, "t.Id = s.Id", source_alias="s", target_alias="t"
        ).when_matched_update_all().when_not_matched_insert_all().execute()
        baseline = time.perf_counter() - started
        theirs = rewritten(DeltaTable(str(table_dir)), DeltaTable(str(table_dir)).version())
        out.append(
            figures(
                workload=f"merge: 10k changes ({pattern}) into {rows:,} rows",
                unit="changes",
                count=CHANGES,
                wall_s=wall,
                floor_s=floor,
                baseline_s=baseline,
                rows=rows,
                pattern=pattern,
                applied=applied,
                replica_s=replica_s,
                partitions_touched=len(buckets),
                phases=phases,
                merge=ours,
                baseline_merge=theirs,
            )
            | {"peak_rss_mb": peak}
        )
    return out


def run(*, small_rows: int = 100_000, large_rows: int = 10_000_000) -> list[dict]:
    conf, spark_start = start_spark()
    rng = random.Random(5)
    rows = []
    for size in (small_rows, large_rows):
        started = time.perf_counter()
        build_replica(size)
        built = time.perf_counter() - started
        work = Path(tempfile.mkdtemp(prefix="bench-merge-"))
        try:
            for r in one_size(size, work, conf, rng):
                rows.append(r | {"build_s": built, "spark_start_s": spark_start})
        finally:
            shutil.rmtree(work, ignore_errors=True)
    by_pattern = {}
    for r in rows:
        by_pattern.setdefault(r["pattern"], []).append(r)
    for _pattern, (small, large) in by_pattern.items():
        large["x_small_table"] = large["wall_s"] / small["wall_s"]
        large["x_small_table_replica"] = large["replica_s"] / small["replica_s"]
        large["x_small_table_merge"] = large["phases"]["apply.merge"] / small["phases"]["apply.merge"]
    return rows
