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
import time
from pathlib import Path

import dagster as dg

from bench.common import (
    bulk_floor,
    figures,
    materialize_replica,
    one_object_defs,
    peak_rss_mb,
    reset_peak_rss,
    start_spark,
)
from bench.initial_load import OBJECT, copied_org
from object_schema.describe import ObjectSchema
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator, **config) -> tuple[float, float, int, dict]:
    """Wall seconds, peak RSS (MB), HTTP requests the org served, and the materialization's metadata."""
    reset_peak_rss()
    wall, calls, meta = materialize_replica(defs, instance, emu, OBJECT, **config)
    return wall, peak_rss_mb(), calls, meta


def floor_pass(salesforce: SalesforceResource, out: Path) -> float:
    """The same Bulk API 2.0 query (Id + the formula fields, live records) read and written as Parquet."""
    fields = ["Id", *ObjectSchema.from_describe(salesforce.describe(OBJECT)).with_formulas().formula_names]
    return bulk_floor(salesforce, OBJECT, fields, out, include_deleted=False)


def _change(emu: Emulator, changes: int) -> None:
    rng = random.Random(7)
    for record_id in rng.sample(emu.store.ids(OBJECT), changes):
        with emu.store.transaction() as txn:
            txn.update(OBJECT, record_id, {"AnnualRevenue": rng.randrange(10_000, 90_000_000)})


def run(*, records: int = 1_000_000, changes: int = 1_000) -> list[dict]:
    conf, _ = start_spark()
    rows = []
    with copied_org(records, "bench-formulas-") as (work, emu, salesforce):
        instance = dg.DagsterInstance.ephemeral()
        defs = one_object_defs(
            work,
            conf,
            salesforce,
            {"name": OBJECT, "formulas": {"refresh_every": 3600, "overlap": 1, "full_every": 86400}},
        )
        load_s, _, _, _ = _run(defs, instance, emu)  # the initial load (reads the formula values too)
        floors = [floor_pass(salesforce, work / "floor-before.parquet")]
        label = f"{records:,} Accounts"
        for name, config, changed in (
            ("full pass (first refresh)", {"mode": "formulas"}, 0),
            ("full pass again", {"mode": "formulas", "formulas_full": True}, 0),
            (f"incremental pass, {changes:,} changed", {"mode": "formulas"}, changes),
        ):
            if changed:
                time.sleep(1.2)  # past the overlap: the pass reads the changes, not the previous refresh's
                _change(emu, changed)
            wall, peak, calls, meta = _run(defs, instance, emu, **config)
            rows.append(
                figures(
                    workload=f"formula refresh, {name}: {label}",
                    unit="records",
                    count=meta["formulas_rows_read"],
                    wall_s=wall,
                    api_calls=calls,
                    rows_refreshed=meta["formulas_rows_refreshed"],
                    full_pass=meta["formulas_full_pass"],
                    merges=meta["formulas_merges"],
                    initial_load_s=load_s,
                    phases={
                        k: v
                        for k, v in meta.items()
                        if k.startswith("formulas_") and isinstance(v, float) and "age" not in k
                    },
                )
                | {"peak_rss_mb": peak}
            )
        floors.append(floor_pass(salesforce, work / "floor-after.parquet"))
    floor = sum(floors) / len(floors)
    full = rows[1]["wall_s"]
    for row in rows:  # the floor reads every record: a full pass's
        row |= {"x_baseline": full / row["wall_s"]}
        if row["full_pass"]:
            row |= {"floor_s": floor, "floor_runs_s": floors, "x_floor": row["wall_s"] / floor}
    return rows
