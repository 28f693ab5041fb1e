"""Initial load: an object's first materialization, a Bulk API 2.0 `queryAll` of every record
(docs/design/contract.md §7), from the emulator over HTTPS through the platform's resync path, in one `materialize()` of
the replica asset.

Same run, same org: **floor** = the same Bulk API job fetched page by page with the same client and CSV parser
(pyarrow), the pages written as Parquet, no typing or layout (run before and after the platform; the mean).
The org (Accounts made by the emulator's workload data generator, in transactions of 5,000 records) is built once
into `bench/out/initial-<n>/` and reused.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import (
    PlatformRunner,
    bulk_floor,
    figures,
    peak_rss_mb,
    reset_peak_rss,
    start_spark,
    write_replication,
)
from bench.workloads import OUT
from cdc_assets.names import replica_key
from object_schema.describe import ObjectSchema
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator import workload_data as data

OBJECT = "Account"
TX_RECORDS = 5_000


def build_org(records: int) -> tuple[Path, float]:
    """An org with `records` Accounts (built once); and how long building took (0 if reused)."""
    root = OUT / f"initial-{records}"
    done = root / "done.json"
    if done.exists():
        return root, json.loads(done.read_text())["build_s"]
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(11)
    started = time.perf_counter()
    emu = Emulator(root / "org")
    try:
        for start in range(0, records, TX_RECORDS):
            with emu.store.transaction() as txn:
                for _ in range(min(TX_RECORDS, records - start)):
                    txn.create(OBJECT, data.new_record(rng, OBJECT))
    finally:
        emu.stop()
    build_s = time.perf_counter() - started
    done.write_text(json.dumps({"records": records, "build_s": build_s}))
    return root, build_s


@contextmanager
def copied_org(records: int, prefix: str) -> Iterator[tuple[Path, Emulator, SalesforceResource]]:
    """A work directory holding a copy of the `records`-Account org (built once), its emulator serving it, and a
    client of it; the directory is removed afterwards."""
    source, _ = build_org(records)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        shutil.copytree(source / "org", work / "org", ignore=shutil.ignore_patterns("bulk"))
        with Emulator(work / "org") as emu:
            yield (
                work,
                emu,
                SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)),
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def floor_pass(salesforce: SalesforceResource, out: Path) -> float:
    return bulk_floor(salesforce, OBJECT, ObjectSchema.from_describe(salesforce.describe(OBJECT)).org_fields, out)


def run(*, records: int = 1_000_000) -> list[dict]:
    root, build_s = build_org(records)
    conf, spark_start = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-initial-"))
    try:
        with Emulator(root / "org") as emu:
            salesforce = SalesforceResource(
                instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
            )
            config = write_replication(work / "replication.yaml", {OBJECT: None}, initial_load=True)
            (work / "landing").mkdir()
            platform = PlatformRunner(
                config=config, landing=work / "landing", warehouse=work / "wh", spark_conf=conf, salesforce=salesforce
            )
            floors = [floor_pass(salesforce, work / "floor-before.parquet")]
            reset_peak_rss()
            wall, phases, metadata = platform.run(selection=[replica_key(OBJECT)])
            peak = peak_rss_mb()
            floors.append(floor_pass(salesforce, work / "floor-after.parquet"))
            floor = sum(floors) / len(floors)
        meta = metadata[replica_key(OBJECT).to_user_string()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [
        figures(
            workload=f"initial load: {records:,} Accounts, Bulk API 2.0",
            unit="records",
            count=records,
            wall_s=wall,
            floor_s=floor,
            floor_runs_s=floors,
            spark_start_s=spark_start,
            org_build_s=build_s,
            snapshot_rows=meta.get("snapshot_rows"),
            row_count=meta.get("dagster/row_count"),
            phases=phases,
        )
        | {"peak_rss_mb": peak}
    ]
