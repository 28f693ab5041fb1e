"""Commit-to-Delta latency: how long after a change commits in the org it is visible in the replica, and where
that time goes.

A probe creates one Account through the org's REST API (a new record: nothing else touches it first), notes the
moment a landing file containing it becomes visible, and polls the Account replica until the row is there. The
Delta commit that made it visible names its run; the Dagster instance says when that run was requested, launched,
started, and when its steps began (demo/run_timeline.py). Against the running demo:
`python -m demo.latency [--probes 8]` (reads `.demo/demo.json`, written by `python -m demo`).

Per probe, the phases from the org's commit to the row in Delta:
org -> landed (the subscriber's delivery and file roll), landed -> tick (the landing sensor's next tick: its
interval, or a landing run in flight), tick -> requested (the sensor's evaluation), requested -> launched (the
run queue), launched -> process (the run worker's Python and Dagster start), process -> run start (importing and
building the definitions), run start -> first step (resources: the Spark session), ingest (the change_events
step and whatever ran before the Account step), Account step (its start to its Delta commit), seen (the probe's
poll).
"""

from __future__ import annotations

import argparse
import dataclasses
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
REPLICA = "Account"
REPLICA_STATE = "cdc.replica"  # replication/state.py: every replica commit's state, with the run that wrote it


@dataclass
class Probe:
    record_id: str
    created_at: float
    landed_at: float
    visible_at: float
    version: int | None = None  # the replica's Delta version in which the row was first seen

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
    return {
        p
        for p in landing.rglob("*.jsonl")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(landing).parts)
    }


def _seen_in(warehouse: Path, record_id: str, name: str) -> int | None:
    """The replica's version if the probe's row is there (with its name), else None."""
    try:
        table = DeltaTable(str(warehouse / REPLICA))
    except TableNotFoundError:
        return None
    # The cast: delta-rs writes some files' strings as string_view, and `equal` has no (string, string_view) kernel.
    rows = read_table(table, columns=["Name"], filter=pc.field("Id").cast(pa.string()) == record_id)
    return table.version() if rows.num_rows > 0 and rows["Name"][0].as_py() == name else None


def probe(
    sf: Salesforce, landing: Path, warehouse: Path, *, timeout_seconds: float = 300.0, poll_seconds: float = 0.25
) -> Probe:
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
        if landed_at is not None and (version := _seen_in(warehouse, record_id, marker)) is not None:
            return Probe(record_id, created_at, landed_at, time.time(), version)
        time.sleep(poll_seconds)
    raise TimeoutError(
        f"probe {record_id} ({marker}) not visible in {warehouse / REPLICA} after "
        f"{timeout_seconds:.0f} s (landed: {landed_at is not None})"
    )


def replica_commit(warehouse: Path, version: int) -> tuple[float, str | None]:
    """(commit time, run id) of the replica's commit `version`, from its Delta log."""
    table = DeltaTable(str(warehouse / REPLICA))
    for commit in table.history(max(1, table.version() - version + 1)):
        if commit.get("version") == version:
            state = json.loads(commit[REPLICA_STATE]) if REPLICA_STATE in commit else {}
            return commit["timestamp"] / 1000, state.get("run_id")
    raise LookupError(f"{REPLICA} version {version} is not in its history")


PHASES = [
    "org -> landed",
    "landed -> tick",
    "tick -> requested",
    "requested -> launched",
    "launched -> process",
    "process -> run start",
    "run start -> first step",
    "ingest",
    "Account step",
    "seen",
]


def breakdown(p: Probe, timeline, commit_at: float) -> dict[str, float | None]:  # type: ignore[no-untyped-def]
    """The probe's phases (PHASES, seconds; None where its run did not go through one), from `timeline`, the
    RunTimeline of the run that committed it at `commit_at`."""
    t = timeline
    account = t.step_start(REPLICA) if t else None
    marks = [
        p.created_at,
        p.landed_at,
        t.tick if t else None,
        t.created if t else None,
        t.launched if t else None,
        t.process if t else None,
        t.run_start if t else None,
        t.first_step if t else None,
        account,
        commit_at,
        p.visible_at,
    ]
    out, last = {}, marks[0]
    for name, mark in zip(PHASES, marks[1:], strict=True):  # a phase not gone through adds to the next one
        if mark is not None and name != PHASES[0]:
            # A run requested (or started) before the file landed picks it up at its ingest: the probe waited
            # only for what was left of the run's phases, so those before the landing count 0.
            mark = max(mark, p.landed_at)
        out[name] = None if mark is None else mark - last
        last = mark if mark is not None else last
    return out


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]


def table(rows: list[dict[str, float | None]], totals: list[float]) -> str:
    """A markdown table: each phase's median, p95, min, max over the probes, then the total's."""
    lines = ["| phase | median s | p95 s | min s | max s |", "|---|---|---|---|---|"]
    for name in PHASES:
        values = [r[name] for r in rows if r.get(name) is not None]
        if values:
            lines.append(
                f"| {name} | {statistics.median(values):.1f} | {p95(values):.1f} | {min(values):.1f} | "
                f"{max(values):.1f} |"
            )
    lines.append(
        f"| **org commit -> row in Delta** | **{statistics.median(totals):.1f}** | **{p95(totals):.1f}** | "
        f"{min(totals):.1f} | {max(totals):.1f} |"
    )
    return "\n".join(lines)


def summary(probes: list[Probe]) -> str:
    lat = [p.landing_to_delta for p in probes]
    return (
        f"landing -> Delta: median {statistics.median(lat):.1f} s, min {min(lat):.1f} s, max {max(lat):.1f} s "
        f"over {len(lat)} probes (change -> Delta median "
        f"{statistics.median(p.change_to_delta for p in probes):.1f} s; change -> landed median "
        f"{statistics.median(p.change_to_landing for p in probes):.2f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--pause", type=float, default=20.0, help="seconds between probes")
    parser.add_argument("--info", type=Path, default=DEMO_INFO)
    parser.add_argument("--out", type=Path, help="also write each probe's times (JSON lines) here")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds a probe may take (a demo's first landing run, on a cold Spark, can take minutes)",
    )
    args = parser.parse_args(argv)
    info = json.loads(args.info.read_text())
    sf = Salesforce(
        instance_url=info["instance_url"],
        session_id=info["token"],
        session=CaPinnedSession(info["ca_file"]),
        version="59.0",
    )
    warehouse = Path(info["warehouse"])
    home = Path(info.get("dagster_home") or Path(info["landing_dir"]).parent / "dagster_home")
    import dagster as dg  # only here: the probes themselves need no Dagster

    from demo.run_timeline import run_timeline

    probes, rows = [], []
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for number in range(args.probes):
            if number:
                time.sleep(args.pause)
            p = probe(sf, Path(info["landing_dir"]), warehouse, timeout_seconds=args.timeout)
            commit_at, run_id = replica_commit(warehouse, p.version)
            timeline = run_timeline(instance, run_id) if run_id else None
            probes.append(p)
            rows.append(breakdown(p, timeline, commit_at))
            if args.out:
                with args.out.open("a") as out:
                    out.write(
                        json.dumps(
                            {
                                "probe": dataclasses.asdict(p),
                                "commit_at": commit_at,
                                "run": dataclasses.asdict(timeline) if timeline else None,
                            }
                        )
                        + "\n"
                    )
            phases = ", ".join(f"{k} {v:.1f}" for k, v in rows[-1].items() if v is not None)
            print(
                f"probe {number + 1}: change -> Delta {p.change_to_delta:.1f} s (run {(run_id or '?')[:8]}): {phases}",
                flush=True,
            )
    print(summary(probes))
    print(table(rows, [p.change_to_delta for p in probes]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
