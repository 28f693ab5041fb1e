"""Big tables: the initial load and a resync of N records of 64 columns (the emulator's generated bulk-only object
`Wide_Thing__c`, `Emulator.add_bulk_object`: result pages computed per row range, so any N costs no org build).

The emulator runs in a process of its own (its page generation and memory are not ours); the platform reads it
over HTTPS through Bulk API 2.0 with parallel result pages (`bulk_parallel_pages`). Same run, same org:
**floor** = the same job's pages fetched with the same client and parsed with the same CSV parser (pyarrow), written
as Parquet, no typing or layout (before the platform). Peak RSS is this process and its Spark JVM, the emulator
excluded.

    python -m bench.big_table 1000000 3000000 [--resync]    # one JSON line per size
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from bench.common import (
    PlatformRunner,
    bulk_floor,
    figures,
    peak_rss_mb,
    reset_peak_rss,
    start_spark,
    write_replication,
)
from cdc_assets.names import replica_key
from object_schema.describe import ObjectSchema
from resources.salesforce import SalesforceResource
from sensors.work import mode_run_config

COLUMNS = 64
PARALLEL_PAGES = 2


def serve(records: int, root: Path) -> None:
    """The emulator with the generated object, until stdin closes (run as `python -m bench.big_table serve`)."""
    from salesforce_emulator import Emulator

    with Emulator(root / "org") as emu:
        name = emu.add_bulk_object(records, COLUMNS)
        print(
            json.dumps({"instance_url": emu.instance_url, "token": emu.token, "ca_file": emu.ca_file, "object": name}),
            flush=True,
        )
        sys.stdin.read()


def floor_pass(salesforce: SalesforceResource, name: str, out: Path) -> float:
    fields = ObjectSchema.from_describe(salesforce.describe(name)).org_fields
    return bulk_floor(salesforce, name, fields, out, parallel_pages=PARALLEL_PAGES)


def measure(records: int, conf: dict[str, str], *, resync: bool) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-big-"))
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.big_table", "serve", str(records), str(work)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        org = json.loads(server.stdout.readline())
        salesforce = SalesforceResource(
            instance_url=org["instance_url"], access_token=org["token"], ca_bundle=org["ca_file"]
        )
        name = org["object"]
        config = write_replication(work / "replication.yaml", {name: None}, initial_load=True)
        (work / "landing").mkdir()
        platform = PlatformRunner(
            config=config, landing=work / "landing", warehouse=work / "wh", spark_conf=conf, salesforce=salesforce
        )
        floor = floor_pass(salesforce, name, work / "floor.parquet")
        (work / "floor.parquet").unlink()
        rows = []
        reset_peak_rss()
        wall, phases, metadata = platform.run(selection=[replica_key(name)])
        meta = metadata[replica_key(name).to_user_string()]
        rows.append(
            figures(
                workload=f"initial load: {records:,} records x {COLUMNS} columns, Bulk API 2.0",
                unit="records",
                count=records,
                wall_s=wall,
                floor_s=floor,
                snapshot_rows=meta.get("snapshot_rows"),
                row_count=meta.get("dagster/row_count"),
                phases=phases,
            )
            | {"peak_rss_mb": peak_rss_mb(exclude={server.pid})}
        )
        if resync:
            reset_peak_rss()
            assets = [a for a in platform.assets if replica_key(name) in a.keys]
            started = time.perf_counter()
            result = dg.materialize(
                assets,
                resources=platform.defs.resources,
                instance=platform.instance,
                run_config=mode_run_config({name: "resync"}),
            )
            wall = time.perf_counter() - started
            event = result.asset_materializations_for_node(replica_key(name).to_python_identifier())[-1]
            meta = {k: v.value for k, v in event.metadata.items()}
            rows.append(
                figures(
                    workload=f"resync: {records:,} records x {COLUMNS} columns over its replica",
                    unit="records",
                    count=records,
                    wall_s=wall,
                    floor_s=floor,
                    snapshot_rows=meta.get("snapshot_rows"),
                    row_count=meta.get("dagster/row_count"),
                )
                | {"peak_rss_mb": peak_rss_mb(exclude={server.pid})}
            )
        return rows
    finally:
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def run(*, records: tuple[int, ...] = (1_000_000,), resync: bool = True) -> list[dict]:
    conf, _ = start_spark()
    return [row for n in records for row in measure(n, conf, resync=resync)]


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        conf, _ = start_spark()
        for n in [int(a) for a in sys.argv[1:] if a.isdigit()] or [1_000_000]:
            for row in measure(n, conf, resync="--resync" in sys.argv):
                print(json.dumps(row, default=str), flush=True)
