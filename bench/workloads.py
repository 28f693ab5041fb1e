"""Reproducible workloads for the benchmarks: landing files produced by the emulator's CDC publisher.

Each workload is generated once into `bench/out/<name>/` (seeded, so the same files every time) and reused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload

OUT = Path(__file__).resolve().parent / "out"
OBJECTS = ["Account", "Contact", "Opportunity", "Lead", "Case"]


def count_lines(landing: Path) -> int:
    return sum(1 for f in landing.rglob("*.jsonl") for _ in f.open())


def cdc_workload(name: str, *, accounts: int, changes: int, seed: int = 42) -> Path:
    """An org built from scratch plus `changes` transactions, all as CDC files; describe() files beside them."""
    root = OUT / name
    done = root / "done.json"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    landing = root / "landing"
    with Emulator(root / "org", landing_dir=landing, roll_seconds=3600) as emu:
        workload = Workload(emu, seed=seed)
        workload.build_org(accounts=accounts)
        workload.run(changes=changes)
        emu.flush_cdc()
        describe = root / "describe"
        describe.mkdir()
        for obj in OBJECTS:
            (describe / f"{obj}.json").write_text(json.dumps(emu.store.describe(obj)))
        final = {obj: emu.store.snapshot(obj) for obj in OBJECTS}
    (root / "final.json").write_text(json.dumps(final))
    done.write_text(json.dumps({"events": count_lines(landing)}))
    return root


def events_in(root: Path) -> int:
    return json.loads((root / "done.json").read_text())["events"]
