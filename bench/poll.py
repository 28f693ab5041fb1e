"""Polling (`mode: poll`): API calls and seconds of one poll that finds 1k changed records in a large object,
against a full re-query of the object (a `resync` run: Bulk API 2.0 `queryAll` of every record), from the emulator
over HTTPS, each one `materialize()` of the replica asset.

Rows: a poll through one REST query (the delta fits `poll_rest_max_records`), the same delta through a Bulk API 2.0
job (`poll_rest_max_records` below the delta), a poll that also compares every Id with the org (hard deletes), and
the full re-query. The org (Accounts, built once into `bench/out/initial-<n>/` by the initial-load benchmark) is
copied and loaded once (initial load); then, for each row, the cursor is settled on a marker record (`_settle`),
`changes` Accounts are updated, one transaction each, and the run is timed. A poll re-reads `OVERLAP` seconds behind
its cursor (1 s here, 5 min by default): `rows_read` is the changes and the marker.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
import yaml

from bench.common import figures, start_spark
from bench.initial_load import OBJECT, build_org
from cdc_assets.assets import replica_key
from definitions import build_defs
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator

OVERLAP = 1  # seconds: a poll also re-reads the last second of the previous round's changes


def _defs(work: Path, conf: dict, salesforce: SalesforceResource, **poll) -> dg.Definitions:
    config = work / "replication.yaml"
    config.write_text(yaml.safe_dump({
        "options": {"transaction_close_after": 0, "initial_load": True},
        "objects": [{"name": OBJECT, "mode": "poll", "poll_overlap": OVERLAP, **poll}]}))
    return build_defs(config_path=config, landing_path=str(work / "landing"), warehouse_root=str(work / "wh"),
                      spark_conf=conf, salesforce=salesforce)


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator, **config) -> tuple[float, int, dict]:
    """Wall seconds, HTTP requests the org served, and the materialization's metadata."""
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and replica_key(OBJECT) in a.keys]
    ops = {replica_key(OBJECT).to_python_identifier(): {"config": config}} if config else {}
    emu.reset_request_counts()
    started = time.perf_counter()
    result = dg.materialize(assets, resources=defs.resources, instance=instance, run_config={"ops": ops})
    wall = time.perf_counter() - started
    [event] = result.get_asset_materialization_events()
    return wall, sum(emu.request_counts().values()), {k: v.value for k, v in event.materialization.metadata.items()}


def _change(emu: Emulator, changes: int, seed: int) -> None:
    rng = random.Random(seed)
    for record_id in rng.sample(emu.store.ids(OBJECT), changes):
        with emu.store.transaction() as txn:
            txn.update(OBJECT, record_id, {"Description": f"changed {rng.random():.6f}"})


def _settle(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator) -> None:
    """Leave the cursor on one marker record stamped more than the overlap after every earlier change, so that the
    next poll's delta is the next changes (and the marker)."""
    time.sleep(OVERLAP + 0.2)
    with emu.store.transaction() as txn:
        txn.update(OBJECT, emu.store.ids(OBJECT)[0], {"Description": f"marker {time.time()}"})
    _run(defs, instance, emu)


def run(*, records: int = 1_000_000, changes: int = 1_000) -> list[dict]:
    source, _ = build_org(records)
    conf, _ = start_spark()
    work = Path(tempfile.mkdtemp(prefix="bench-poll-"))
    rows = []
    try:
        shutil.copytree(source / "org", work / "org", ignore=shutil.ignore_patterns("bulk"))
        with Emulator(work / "org") as emu:
            salesforce = SalesforceResource(instance_url=emu.instance_url, access_token=emu.token,
                                            ca_bundle=str(emu.ca_file))
            instance = dg.DagsterInstance.ephemeral()
            rest = _defs(work, conf, salesforce, hard_delete_check_every=10 ** 9)
            load_s, load_calls, _ = _run(rest, instance, emu)  # the initial load
            label = f"{changes:,} changes in {records:,} Accounts"
            for name, defs, config, seed in (
                    ("poll, one REST query", rest, {}, 1),
                    ("poll, Bulk API 2.0 job", _defs(work, conf, salesforce, poll_rest_max_records=100,
                                                     hard_delete_check_every=10 ** 9), {}, 2),
                    ("poll + Id comparison", rest, {"compare_ids": True}, 3),
                    ("full re-query (resync)", rest, {"mode": "resync"}, 4)):
                _settle(rest, instance, emu)
                _change(emu, changes, seed)
                wall, calls, meta = _run(defs, instance, emu, **config)
                rows.append(figures(workload=f"{name}: {label}", unit="records", count=changes, wall_s=wall,
                                    api_calls=calls, rows_read=meta.get("poll_rows_read", meta.get("snapshot_rows")),
                                    rows_written=meta.get("poll_rows_written", meta.get("snapshot_rows")),
                                    initial_load_s=load_s, initial_load_calls=load_calls,
                                    phases={k: v for k, v in meta.items() if k.startswith("seconds_")}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    full = rows[-1]["wall_s"]
    for row in rows:
        row["x_baseline"] = full / row["wall_s"]
    return rows
