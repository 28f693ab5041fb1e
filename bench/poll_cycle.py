"""A poll cycle over hundreds of polled objects: what the poll sensor costs (sensors/poll.py).

`python -m bench.poll_cycle [N ...]` (default 300 999: the emulator names at most 999): an emulator org of N generated custom objects
(`Thing_001__c` ..., 3 records each), every one `source: poll` at the default `poll_interval` (300 s), each replica
as a poll left it (its last materialization's `poll_next`: a cursor at the org's newest change, read past the
overlap, Ids compared). Figures, per N:
- `build_defs` for the N objects (in this process, after imports), and the number of sensors;
- one tick of the poll sensor with nothing changed in the org (idle): seconds, API calls by resource, runs asked;
- one tick after a change in every tenth object (busy): the same.

With `--runs` (smaller N: the runs are real), the cycle's runs are executed as the daemon would (`materialize()`,
a fresh instance, `poll_overlap` 2 s): the first cycle loads every object (wall, runs), the second polls each once,
then a change in every tenth object is polled by the next cycle (wall from the sensor's tick to the last run's
end, runs, objects).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import yaml

from cdc_assets.names import META_POLL_NEXT, replica_key
from definitions import build_defs
from resources.salesforce import SalesforceResource, soql_datetime
from salesforce_emulator import Emulator
from salesforce_emulator.custom_objects import custom_object_name
from salesforce_emulator.workload import Workload
from sensors.poll import SENSOR_NAME

OVERLAP = 300.0


def polled_config(path: Path, names: list[str], overlap: float = OVERLAP, **more: float) -> Path:
    """A replication.yaml polling `names`, loaded at once; `more`: more of its `options` (e.g. poll_interval)."""
    options = {"initial_load": True, "poll_overlap": overlap, "hard_delete_check_every": 86_400, **more}
    path.write_text(yaml.safe_dump({"options": options, "objects": [{"name": n, "source": "poll"} for n in names]}))
    return path


def as_polled(instance: dg.DagsterInstance, names: list[str], cursor: datetime) -> None:
    """Each replica's last materialization as a poll that read everything up to `cursor` left it."""
    upcoming = {
        "cursor": soql_datetime(cursor),
        "field": "SystemModstamp",
        "read_at": (cursor + timedelta(seconds=OVERLAP)).isoformat(),
        "resume": False,
        "ids_compared_at": datetime.now(UTC).isoformat(),
    }
    for name in names:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(replica_key(name), metadata={META_POLL_NEXT: dg.MetadataValue.json(upcoming)})
        )


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator) -> dict:
    emu.reset_request_counts()
    # The resources the sensor asks for, as the daemon gives them (not Spark, which no sensor starts).
    context = dg.build_sensor_context(
        instance=instance, resources={"salesforce": defs.resources["salesforce"]}, definitions=defs
    )
    started = time.perf_counter()
    result = defs.get_sensor_def(SENSOR_NAME)(context)
    seconds = time.perf_counter() - started
    requests = result.run_requests or []
    return {
        "tick_s": round(seconds, 3),
        "api_calls": emu.request_counts(),
        "runs": len(requests),
        "objects_polled": sum(len(r.asset_selection or []) for r in requests),
    }


def measure(objects: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        names = [custom_object_name(n) for n in range(1, objects + 1)]
        with Emulator(root / "org", custom_objects=objects) as emu:
            Workload(emu, seed=5, custom_objects=objects, custom_records=3).build_org(accounts=2)
            built = datetime.now(UTC) + timedelta(seconds=1)
            salesforce = SalesforceResource(
                instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
            )
            started = time.perf_counter()
            defs = build_defs(
                config_path=polled_config(root / "replication.yaml", names),
                landing_path=str(root / "landing"),
                warehouse_root=str(root / "warehouse"),
                salesforce=salesforce,
            )
            build_s = time.perf_counter() - started
            instance = dg.DagsterInstance.ephemeral()
            as_polled(instance, names, built)
            time.sleep(max(0.0, (built - datetime.now(UTC)).total_seconds()) + 0.1)
            idle = tick(defs, instance, emu)
            with emu.store.transaction() as txn:
                for name in names[::10]:
                    txn.update(name, emu.store.ids(name)[0], {"Name": "Changed"})
            busy = tick(defs, instance, emu)
    return {
        "objects": objects,
        "build_defs_s": round(build_s, 2),
        "sensors": len(list(defs.sensors)),
        "idle": idle,
        "busy": busy,
    }


def cycle_runs(defs: dg.Definitions, instance: dg.DagsterInstance, emu: Emulator, cursor: str | None) -> dict:
    """One tick of the poll sensor and every run it asks for, executed: (wall, runs, objects, the new cursor)."""
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"salesforce": defs.resources["salesforce"]}, definitions=defs
    )
    started = time.perf_counter()
    result = defs.get_sensor_def(SENSOR_NAME)(context)
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    for request in result.run_requests or []:
        selected = set(request.asset_selection or [])
        done = dg.materialize(
            [a for a in assets if set(a.keys) & selected],
            resources=defs.resources,
            instance=instance,
            run_config=request.run_config,
            tags=request.tags,
            selection=list(selected),
        )
        assert done.success, request.tags
    return {
        "wall_s": round(time.perf_counter() - started, 1),
        "runs": len(result.run_requests or []),
        "objects": sum(len(r.asset_selection or []) for r in result.run_requests or []),
        "cursor": result.cursor,
    }


def measure_runs(objects: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        names = [custom_object_name(n) for n in range(1, objects + 1)]
        with Emulator(root / "org", custom_objects=objects) as emu:
            Workload(emu, seed=5, custom_objects=objects, custom_records=3).build_org(accounts=2)
            salesforce = SalesforceResource(
                instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
            )
            defs = build_defs(
                config_path=polled_config(root / "replication.yaml", names, overlap=2.0),
                landing_path=str(root / "landing"),
                warehouse_root=str(root / "warehouse"),
                salesforce=salesforce,
            )
            instance = dg.DagsterInstance.ephemeral()
            load = cycle_runs(defs, instance, emu, None)
            every = json.dumps(dict.fromkeys(names, -1))  # every window due again
            first = cycle_runs(defs, instance, emu, every)  # the first polls, which ask the org nothing
            time.sleep(3)  # past the overlap: the next cycle asks the org before polling
            with emu.store.transaction() as txn:
                for name in names[::10]:
                    txn.update(name, emu.store.ids(name)[0], {"Name": "Changed"})
            changed = cycle_runs(defs, instance, emu, every)
    return {
        "objects": objects,
        "initial_load": _plain(load),
        "first_polls": _plain(first),
        "tenth_changed": _plain(changed),
    }


def _plain(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "cursor"}


def run(sizes: tuple[int, ...] = (300, 999), *, runs: bool = False) -> list[dict]:
    results = [measure_runs(n) if runs else measure(n) for n in sizes]
    for r in results:
        print(json.dumps(r))
    return results


if __name__ == "__main__":
    arguments = sys.argv[1:]
    with_runs = "--runs" in arguments
    sizes = tuple(int(a) for a in arguments if a != "--runs")
    run(sizes or ((50, 200) if with_runs else (300, 999)), runs=with_runs)
