"""Polling (`source: poll`): API calls and seconds of one poll that finds 1k changed records in a large object,
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
import time
from pathlib import Path

import dagster as dg

from bench.common import figures, materialize_replica, one_object_defs, start_spark
from bench.initial_load import OBJECT, copied_org
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator

OVERLAP = 1  # seconds: a poll also re-reads the last second of the previous round's changes


def _defs(work: Path, conf: dict, salesforce: SalesforceResource, **poll) -> dg.Definitions:
    return one_object_defs(work, conf, salesforce, {"name": OBJECT, "source": "poll", "poll_overlap": OVERLAP, **poll})


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator, **config) -> tuple[float, int, dict]:
    return materialize_replica(defs, instance, emu, OBJECT, **config)


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
    conf, _ = start_spark()
    rows = []
    with copied_org(records, "bench-poll-") as (work, emu, salesforce):
        instance = dg.DagsterInstance.ephemeral()
        rest = _defs(work, conf, salesforce, hard_delete_check_every=10**9)
        load_s, load_calls, _ = _run(rest, instance, emu)  # the initial load
        label = f"{changes:,} changes in {records:,} Accounts"
        for name, defs, config, seed in (
            ("poll, one REST query", rest, {}, 1),
            (
                "poll, Bulk API 2.0 job",
                _defs(work, conf, salesforce, poll_rest_max_records=100, hard_delete_check_every=10**9),
                {},
                2,
            ),
            ("poll + Id comparison", rest, {"compare_ids": True}, 3),
            ("full re-query (resync)", rest, {"mode": "resync"}, 4),
        ):
            _settle(rest, instance, emu)
            _change(emu, changes, seed)
            wall, calls, meta = _run(defs, instance, emu, **config)
            rows.append(
                figures(
                    workload=f"{name}: {label}",
                    unit="records",
                    count=changes,
                    wall_s=wall,
                    api_calls=calls,
                    rows_read=meta.get("poll_rows_read", meta.get("snapshot_rows")),
                    rows_written=meta.get("poll_rows_written", meta.get("snapshot_rows")),
                    initial_load_s=load_s,
                    initial_load_calls=load_calls,
                    phases={k: v for k, v in meta.items() if k.startswith("seconds_")},
                )
            )
    full = rows[-1]["wall_s"]
    for row in rows:
        row["x_baseline"] = full / row["wall_s"]
    return rows
