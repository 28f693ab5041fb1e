"""Formula refresh (`formulas:` in replication.yaml): one refresh of an object's formula columns, from the emulator
over HTTPS (Bulk API 2.0 `query` of Id + the formula fields), each one `materialize()` of the replica asset in mode
`formulas`.

Rows: a full pass (every record's values merged into the formula columns: the table rewritten), the same again
(steady state: the columns exist), an incremental pass after `changes` Accounts were updated (records whose
SystemModstamp moved), and the **floor**: the same Bulk job (Id + formula fields) read page by page with the same
client and CSV parser and written as Parquet, no typing, no merge (before and after the platform; the mean). The
org (Accounts: two formula fields, a double and a text) is built once into `bench/out/initial-<n>/` by the
initial-load benchmark and copied; it is loaded once (initial load) with formulas on.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import yaml

from bench.common import figures, peak_rss_mb, reset_peak_rss, start_spark
from bench.initial_load import OBJECT, build_org
from cdc_assets.assets import replica_key
from definitions import build_defs
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from spark_ops.schema import ObjectSchema


def _defs(work: Path, conf: dict, salesforce: SalesforceResource, **formulas) -> dg.Definitions:
    config = work / "replication.yaml"
    config.write_text(yaml.safe_dump({
        "options": {"transaction_close_after": 0, "initial_load": True},
        "objects": [{"name": OBJECT, "formulas": {"refresh_every": 3600, "overlap": 1, **formulas}}]}))
    return build_defs(config_path=config, landing_path=str(work / "landing"), warehouse_root=str(work / "wh"),
                      spark_conf=conf, salesforce=salesforce)


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator, **config) -> tuple[float, float, int, dict]:
    """Wall seconds, peak RSS (MB), HTTP requests the org served, and the materialization's metadata."""
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and replica_key(OBJECT) in a.keys]
    ops = {replica_key(OBJECT).to_python_identifier(): {"config": config}} if config else {}
    emu.reset_request_counts()
    reset_peak_rss()
    started = time.perf_counter()
    result = dg.materialize(assets, resources=defs.resources, instance=instance, run_config={"ops": ops})
    wall = time.perf_counter() - started
    peak = peak_rss_mb()
    [event] = result.get_asset_materialization_events()
    return wall, peak, sum(emu.request_counts().values()), \
        {k: v.value for k, v in event.materialization.metadata.items()}


def floor_pass(salesforce: SalesforceResource, out: Path) -> float:
    """The same Bulk API 2.0 query read page by page and written as Parquet: the cost of getting the values."""
    fields = ["Id", *ObjectSchema.from_describe(salesforce.describe(OBJECT)).with_formulas().formula_names]
    started = time.perf_counter()
    writer = None
    for batch in salesforce.bulk_query_all(OBJECT, fields, include_deleted=False):
        writer = writer or pq.ParquetWriter(out, batch.schema)
        writer.write_batch(batch)
    if writer:
        writer.close()
    return time.perf_counter() - started


def _change(emu: Emulator, changes: int) -> None:
    rng = random.Random(7)
    for record_id in rng.sample(emu.store.ids(OBJECT), changes):
        with emu.store.transaction() as txn:
            txn.update(OBJECT, record_id, {"AnnualRevenue": rng.randrange(10_000, 90_000_000)})


def run(*, records: int = 1_000_000, changes: int = 1_000) -> list[dict]:
    source, _ = build_org(records)
    conf, _ = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-formulas-"))
    rows = []
    try:
        shutil.copytree(source / "org", work / "org", ignore=shutil.ignore_patterns("bulk"))
        with Emulator(work / "org") as emu:
            salesforce = SalesforceResource(instance_url=emu.instance_url, access_token=emu.token,
                                            ca_bundle=str(emu.ca_file))
            instance = dg.DagsterInstance.ephemeral()
            defs = _defs(work, conf, salesforce, full_every=86400)
            load_s, _, _, _ = _run(defs, instance, emu)  # the initial load (reads the formula values too)
            floors = [floor_pass(salesforce, work / "floor-before.parquet")]
            label = f"{records:,} Accounts"
            for name, config, changed in (("full pass (first refresh)", {"mode": "formulas"}, 0),
                                          ("full pass again", {"mode": "formulas", "formulas_full": True}, 0),
                                          (f"incremental pass, {changes:,} changed", {"mode": "formulas"}, changes)):
                if changed:
                    time.sleep(1.2)  # past the overlap: the pass reads the changes, not the previous refresh's
                    _change(emu, changed)
                wall, peak, calls, meta = _run(defs, instance, emu, **config)
                rows.append(figures(workload=f"formula refresh, {name}: {label}", unit="records",
                                    count=meta["formulas_rows_read"], wall_s=wall, api_calls=calls,
                                    rows_refreshed=meta["formulas_rows_refreshed"],
                                    full_pass=meta["formulas_full_pass"], merges=meta["formulas_merges"],
                                    initial_load_s=load_s,
                                    phases={k: v for k, v in meta.items() if k.startswith("formulas_") and
                                            isinstance(v, float) and "age" not in k}) | {"peak_rss_mb": peak})
            floors.append(floor_pass(salesforce, work / "floor-after.parquet"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = sum(floors) / len(floors)
    full = rows[1]["wall_s"]
    for row in rows:  # the floor reads every record: a full pass's
        row |= {"x_baseline": full / row["wall_s"]}
        if row["full_pass"]:
            row |= {"floor_s": floor, "floor_runs_s": floors, "x_floor": row["wall_s"] / floor}
    return rows
