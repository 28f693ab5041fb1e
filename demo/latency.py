"""Landing-to-Delta latency: how long after a CDC file lands its change is visible in the replica.

A probe creates one Account through the org's REST API (a new record: nothing else touches it first), notes the
moment a landing file containing it becomes visible, and polls the Account replica until the row is there. Against
the running demo: `python -m demo.latency [--probes 3]` (reads `.demo/demo.json`, written by `python -m demo`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from simple_salesforce import Salesforce

from resources.delta import read_table
from salesforce_emulator.client import CaPinnedSession

DEMO_INFO = Path(".demo/demo.json")


@dataclass
class Probe:
    record_id: str
    created_at: float
    landed_at: float
    visible_at: float

    @property
    def landing_to_delta(self) -> float:
        return self.visible_at - self.landed_at

    @property
    def change_to_landing(self) -> float:
        """Commit in the org -> visible landing file: the CDC delivery (emulator writer, or subscriber)."""
        return self.landed_at - self.created_at

    @property
    def change_to_delta(self) -> float:
        return self.visible_at - self.created_at


def _visible_files(landing: Path) -> set[Path]:
    return {p for p in landing.rglob("*.jsonl") if not any(part.startswith(("_", ".")) for part in
                                                            p.relative_to(landing).parts)}


def _in_replica(warehouse: Path, record_id: str, name: str) -> bool:
    try:
        table = DeltaTable(str(warehouse / "Account"))
    except TableNotFoundError:
        return False
    # The cast: delta-rs writes some files' strings as string_view, and `equal` has no (string, string_view) kernel.
    rows = read_table(table, columns=["Name"],
                      filter=pc.field("Id").cast(pa.string()) == record_id)
    return rows.num_rows > 0 and rows["Name"][0].as_py() == name


def probe(sf: Salesforce, landing: Path, warehouse: Path, *, timeout_seconds: float = 300.0,
          poll_seconds: float = 0.25) -> Probe:
    """One probe; raises TimeoutError if the change is not visible in time."""
    seen = _visible_files(landing)
    marker = f"latency-probe-{uuid.uuid4().hex[:12]}"
    created_at = time.time()
    record_id = sf.Account.create({"Name": marker})["id"]
    deadline = created_at + timeout_seconds
    landed_at = None
    while time.time() < deadline:
        if landed_at is None:
            fresh = _visible_files(landing) - seen
            if any(record_id in f.read_text(errors="replace") for f in fresh):  # a gap event names it too
                landed_at = time.time()
            seen |= fresh
        if landed_at is not None and _in_replica(warehouse, record_id, marker):
            return Probe(record_id, created_at, landed_at, time.time())
        time.sleep(poll_seconds)
    raise TimeoutError(f"probe {record_id} ({marker}) not visible in {warehouse / 'Account'} after "
                       f"{timeout_seconds:.0f} s (landed: {landed_at is not None})")


def summary(probes: list[Probe]) -> str:
    lat = [p.landing_to_delta for p in probes]
    return (f"landing -> Delta: median {statistics.median(lat):.1f} s, min {min(lat):.1f} s, max {max(lat):.1f} s "
            f"over {len(lat)} probes (change -> Delta median "
            f"{statistics.median(p.change_to_delta for p in probes):.1f} s; change -> landed median "
            f"{statistics.median(p.change_to_landing for p in probes):.2f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--pause", type=float, default=20.0, help="seconds between probes")
    parser.add_argument("--info", type=Path, default=DEMO_INFO)
    args = parser.parse_args(argv)
    info = json.loads(args.info.read_text())
    sf = Salesforce(instance_url=info["instance_url"], session_id=info["token"],
                    session=CaPinnedSession(info["ca_file"]), version="59.0")
    probes = []
    for number in range(args.probes):
        if number:
            time.sleep(args.pause)
        probes.append(probe(sf, Path(info["landing_dir"]), Path(info["warehouse"])))
        print(f"probe {number + 1}: change -> landed {probes[-1].change_to_landing:.2f} s, landing -> Delta "
              f"{probes[-1].landing_to_delta:.1f} s", flush=True)
    print(summary(probes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

