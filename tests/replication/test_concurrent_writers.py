"""Two runs writing the same table at once (what one-slot pools prevent): the real ingest and apply code, the
second run reaching its commit after the first committed from the same starting version. The second commit must
fail with ConcurrentWriteError and leave the table exactly as the first run left it; nothing is applied twice.

Each test runs on a local warehouse and on an S3 one (moto's server: the `s3` fixture), where what refuses the
second commit file is the store's conditional put (resources/commit_safety.py)."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from object_schema.describe import ObjectSchema
from replication import apply as apply_module
from replication import ingest as ingest_module
from replication.apply import apply_changes
from replication.closure import Cut
from replication.ingest import IngestRun, ingest
from replication.run import ApplyRun
from replication.state import IngestState
from resources.commit_safety import ensure_safe_commits
from resources.delta import CHANGE_EVENTS, ConcurrentWriteError, DeltaWarehouse, read_table
from resources.landing_zone import LandingZone
from resources.storage import Folder
from salesforce_emulator.landing_lines import event

A1, A2 = "001000000000001AAA", "001000000000002AAA"
T0 = 1_763_800_000_000


@pytest.fixture(params=["local", "s3"])
def setup(request, tmp_path, spark, sample_dir):
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    root = str(tmp_path) if request.param == "local" else f"s3://{request.getfixturevalue('s3').new_bucket()}"
    warehouse = DeltaWarehouse(root=f"{root}/warehouse")
    ensure_safe_commits(warehouse.root, {})  # what a run does first (DeltaWarehouse.setup_for_execution)
    return warehouse, LandingZone(path=f"{root}/landing"), schema


def land(zone: LandingZone, name: str, lines: list[str]) -> None:
    Folder(zone.path).write_atomically(name, "\n".join(lines) + "\n")


def state(warehouse: DeltaWarehouse, name: str) -> tuple[int, list[dict]]:
    table = DeltaTable(warehouse.uri(name))
    return table.version(), sorted(read_table(table).to_pylist(), key=lambda r: json.dumps(r, default=str))


def interleave(monkeypatch, module, point: str, first_run) -> dict:
    """At `point` of the outer (second) run, let the first run go from start to commit; remember its result."""
    seen: dict = {}

    def hook(name: str) -> None:
        if name == point and "first" not in seen:
            seen["first"] = None
            seen["first"] = first_run()

    monkeypatch.setattr(module, "fault_point", hook)
    return seen


def test_a_second_ingest_of_the_same_files_fails_and_ingests_nothing_twice(setup, spark, monkeypatch):
    warehouse, zone, schema = setup
    land(zone, "a.jsonl", [event("Account", "CREATE", [A1], T0, Name="Acme")])
    ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="setup"))
    land(
        zone,
        "b.jsonl",
        [
            event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
            event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot"),
        ],
    )
    seen = interleave(
        monkeypatch,
        ingest_module,
        "ingest.before_commit",
        lambda: (
            ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="first")),
            state(warehouse, CHANGE_EVENTS),
        )[1],
    )
    with pytest.raises(ConcurrentWriteError, match="_change_events: another writer committed"):
        ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="second"))
    assert state(warehouse, CHANGE_EVENTS) == seen["first"]
    assert len(seen["first"][1]) == 3  # every event once


def closed_cut(warehouse) -> Cut:
    """Everything ingested so far, nothing held (as a run deciding after the close timeout would)."""
    return Cut(through=IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)).ingest_seq, open_key=None, clock="")


def test_a_second_apply_from_the_same_read_version_fails_and_applies_nothing_twice(setup, spark, monkeypatch):
    warehouse, zone, schema = setup
    land(zone, "a.jsonl", [event("Account", "CREATE", [A1], T0, Name="Acme")])
    ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="setup"))

    def first_apply():
        apply_changes(ApplyRun(spark, warehouse, schema, run_id="first"), cut=closed_cut(warehouse))
        return state(warehouse, "Account")

    # Both runs find no replica: the first creates it, the second may not append to it.
    seen = interleave(monkeypatch, apply_module, "replica.before_commit", first_apply)
    with pytest.raises(ConcurrentWriteError, match=r"Delta table Account: .* after this run found no table"):
        apply_changes(ApplyRun(spark, warehouse, schema, run_id="second"), cut=closed_cut(warehouse))
    assert state(warehouse, "Account") == seen["first"] and len(seen["first"][1]) == 1

    # Both runs read the replica's checkpoint at the same version: the second merge is rejected.
    land(
        zone,
        "b.jsonl",
        [
            event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
            event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot"),
        ],
    )
    ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="setup"))
    seen = interleave(monkeypatch, apply_module, "replica.before_commit", first_apply)
    with pytest.raises(ConcurrentWriteError, match="after this run read it at version 0"):
        apply_changes(ApplyRun(spark, warehouse, schema, run_id="second"), cut=closed_cut(warehouse))
    version, rows = state(warehouse, "Account")
    assert (version, rows) == seen["first"] and version == 1
    assert {r["Id"]: (r["Name"], r["Rating"]) for r in rows} == {A1: ("Acme", "Hot"), A2: ("Globex", None)}
