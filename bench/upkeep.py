"""Steady state with table upkeep on: many small runs into one warehouse, upkeep every `every` runs.

It answers whether run time and table load time stay flat over 1,000 steady runs once upkeep compacts and
vacuums. Each run lands the events the emulator's workload made since the last one (about `events` of them) and
materializes change_events + the 5 replicas **in this process** (one Spark session for all runs, as a Spark
Connect server gives the daemon's runs; the per-process start the `steady` workload measures is left out, so
that many runs fit). Every `every` runs the upkeep of each table runs as its job does (`upkeep_table`: compact,
vacuum with retention 0 h, and for change_events the payload trim with horizon 0 h, so it does trim: the
configured minimum of 84 h would trim nothing in a benchmark of minutes; the landing files it ingested are retired
and remembered 3 minutes instead of 168 h, for the same reason).

Per run it records the run's wall time, the time to load each table's snapshot (`DeltaTable(uri)`: what every
step does several times) and its file count; figures are reported per window of runs (first, middle, last), so
a trend shows. `--max-seconds` stops early: the figures say how many runs were measured. Progress goes to
`bench/out/upkeep-progress.jsonl` (one line per run) so a long run can be read while it goes.

`python -m bench.upkeep [--runs 1000] [--events 200] [--every 25] [--max-seconds S] [--no-upkeep]`
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from deltalake import DeltaTable

from bench.common import PlatformRunner, start_spark, write_replication
from bench.workloads import OBJECTS, OUT
from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig
from replication.upkeep.compact import Footprint
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import LandingZone
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload

TABLES = [CHANGE_EVENTS, "Account"]


def load_seconds(uri: str) -> float:
    started = time.perf_counter()
    DeltaTable(uri)
    return time.perf_counter() - started


def upkeep_all(warehouse: DeltaWarehouse, landing: LandingZone) -> dict:
    """Every table's upkeep as its job does it, with horizons of 0 h (see the module docstring)."""
    settings = UpkeepConfig.model_construct(
        **{
            **UpkeepConfig().model_dump(),
            "vacuum_retention_hours": 0,
            "change_events_retention_hours": 0,
            "landing_ledger_hours": 0.05,
        }
    )
    out = {}
    for name in [*OBJECTS, CHANGE_EVENTS]:
        out[name] = upkeep_table(warehouse, name, settings, replicated=OBJECTS, landing=landing)
    return out


def window(records: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in records), 4)


def run(
    *, runs: int = 1000, events: int = 200, every: int = 25, max_seconds: float = 3600.0, upkeep: bool = True
) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-upkeep-"))
    landing, staging = work / "landing", work / "staging"
    landing.mkdir()
    progress = OUT / "upkeep-progress.jsonl"
    OUT.mkdir(exist_ok=True)
    progress.write_text("")
    emu = Emulator(work / "org", landing_dir=staging, roll_seconds=3600)
    started = time.perf_counter()
    records: list[dict] = []
    upkeeps: list[dict] = []
    try:
        workload = Workload(emu, seed=11)
        workload.build_org(accounts=300)
        (work / "describe").mkdir()
        for obj in OBJECTS:
            (work / "describe" / f"{obj}.json").write_text(json.dumps(emu.store.describe(obj)))
        write_replication(work / "replication.yaml", {o: work / "describe" / f"{o}.json" for o in OBJECTS})
        conf, _ = start_spark()
        runner = PlatformRunner(
            config=work / "replication.yaml", landing=landing, warehouse=work / "wh", spark_conf=conf
        )
        warehouse = DeltaWarehouse(root=str(work / "wh"))
        copied: set[Path] = set()  # flush_cdc returns every file published so far: land each once
        for n in range(runs + 1):
            landed = 0
            while landed < events or n == 0:
                if n:
                    workload.run(changes=max(1, events // 80))  # ~80 events a transaction (measured)
                for p in emu.flush_cdc():
                    if p in copied:
                        continue
                    copied.add(p)
                    landed += sum(1 for _ in p.open())
                    shutil.copy2(p, landing / f"{n:05d}-{p.name}")
                if n == 0:
                    break
            wall, _, _ = runner.run()
            if n == 0:
                continue  # the bootstrap run (the org's creation), reported apart
            record = {"run": n, "events": landed, "wall_s": round(wall, 3)}
            for name in TABLES:
                table = warehouse.table(name)
                record[f"load_{name}_s"] = round(load_seconds(table.table_uri), 4)
                record[f"files_{name}"] = Footprint.of(table).files
            if upkeep and n % every == 0:
                t = time.perf_counter()
                done = upkeep_all(warehouse, LandingZone(path=str(landing)))
                upkeeps.append(
                    {
                        "after_run": n,
                        "seconds": round(time.perf_counter() - t, 2),
                        "change_events": done[CHANGE_EVENTS],
                        "Account": done["Account"],
                    }
                )
                record["upkeep_s"] = upkeeps[-1]["seconds"]
            records.append(record)
            with progress.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if time.perf_counter() - started > max_seconds:
                break
    finally:
        emu.stop()
        shutil.rmtree(work, ignore_errors=True)
    third = max(len(records) // 3, 1)
    windows = {"first": records[:third], "middle": records[third : 2 * third], "last": records[-third:]}
    return {
        "runs_measured": len(records),
        "runs_asked": runs,
        "events_per_run": statistics.median(r["events"] for r in records),
        "upkeep_every": every if upkeep else None,
        "windows": {
            w: {
                "runs": f"{rs[0]['run']}-{rs[-1]['run']}",
                "wall_s": window(rs, "wall_s"),
                **{f"load_{t}_s": window(rs, f"load_{t}_s") for t in TABLES},
                **{f"files_{t}_max": max(r[f"files_{t}"] for r in rs) for t in TABLES},
            }
            for w, rs in windows.items()
            if rs
        },
        "upkeeps": upkeeps[:2] + upkeeps[-2:],
        "upkeep_seconds_median": statistics.median(u["seconds"] for u in upkeeps) if upkeeps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    parser.add_argument("--no-upkeep", action="store_true")
    args = parser.parse_args()
    print(
        json.dumps(
            run(
                runs=args.runs,
                events=args.events,
                every=args.every,
                max_seconds=args.max_seconds,
                upkeep=not args.no_upkeep,
            ),
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
