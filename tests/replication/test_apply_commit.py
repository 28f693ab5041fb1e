"""An apply that writes no row still commits its checkpoint: the real ingest, apply and Delta."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP, apply_changes
from replication.closure import Cut
from replication.history.stage import history_name
from replication.ingest import IngestRun, ingest
from replication.records import SNAPSHOT, records_to_text, replica_rows
from replication.run import ApplyRun
from replication.state import IngestState, ReplicaState
from resources.delta import CHANGE_EVENTS, DeltaWarehouse, read_table
from resources.landing_zone import LandingZone
from resources.staged import read_staged
from salesforce_emulator.landing_lines import event

A1 = "001000000000001AAA"
T0 = 1_763_800_000_000


def test_an_apply_whose_every_row_is_superseded_commits_its_checkpoint(tmp_path, spark, sample_dir):
    """A snapshot row newer than the one event landed: the event is superseded, no row changes, and the checkpoint
    still moves in a commit of its own; the next run reads nothing again."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse, zone = DeltaWarehouse(root=str(tmp_path / "warehouse")), LandingZone(path=str(landing))
    snapshot_ts = datetime.fromtimestamp((T0 + 10_000) / 1000, UTC)
    text = records_to_text(
        [
            {
                "Id": A1,
                "Name": "Acme",
                "IsDeleted": False,
                "SystemModstamp": snapshot_ts.isoformat().replace("+00:00", "Z"),
            }
        ],
        schema.org_fields,
    )
    snapshot = replica_rows(text, schema, source=SNAPSHOT, synced_at=snapshot_ts)
    warehouse.append(
        "Account",
        snapshot,
        read=None,
        partition_by=[BUCKET_COLUMN],
        key=ReplicaState.KEY,
        state=ReplicaState().to_dict(),
        txns={APPLY_APP: 0},
    )
    (landing / "a.jsonl").write_text(event("Account", "UPDATE", [A1], T0 + 1000, Name="Older") + "\n")
    ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="ingest"))
    through = IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)).ingest_seq
    cut = Cut(through=through, open_key=None, clock="")
    before = warehouse.table("Account").version()

    first = apply_changes(ApplyRun(spark, warehouse, schema, run_id="first"), cut=cut)
    assert (first.counts["superseded"], first.counts["rows_written"]) == (1, 0)
    table = warehouse.table("Account")
    assert first.committed and table.version() == before + 1 == first.version
    assert table.transaction_version(APPLY_APP) == through
    assert ReplicaState.read(warehouse, table).applied_through == first.state.applied_through == through

    second = apply_changes(ApplyRun(spark, warehouse, schema, run_id="second"), cut=cut)
    assert second.counts["events_read"] == 0 and not second.committed
    assert warehouse.table("Account").version() == first.version


def test_rows_and_history_versions_an_apply_writes_carry_its_runs_time(tmp_path, spark, sample_dir):
    """`_sf_synced_at` of what an apply writes is the run's time (the checks select a commit's rows by it), stamped
    outside the fold's query (replication/records.py `stamped`): the replica rows and the history versions staged."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse, zone = DeltaWarehouse(root=str(tmp_path / "warehouse")), LandingZone(path=str(landing))
    (landing / "a.jsonl").write_text(
        "\n".join(
            [
                event("Account", "CREATE", [A1], T0, Name="Acme"),
                event("Account", "UPDATE", [A1], T0 + 1000, Name="Acme Corp"),
            ]
        )
        + "\n"
    )
    ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="ingest"))
    cut = Cut(through=IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)).ingest_seq, open_key=None, clock="")
    now = datetime(2026, 11, 24, 12, 0, 0, 123456, tzinfo=UTC)

    result = apply_changes(ApplyRun(spark, warehouse, schema, run_id="run", now=now, history=True), cut=cut)
    rows = read_table(warehouse.table("Account"))
    versions = read_staged(warehouse.root, history_name("Account"), result.state.history.file)
    assert rows["Name"].to_pylist() == ["Acme Corp"] and versions.num_rows == 2
    assert set(rows["_sf_synced_at"].to_pylist()) == set(versions["_sf_synced_at"].to_pylist()) == {now}
    assert result.state.synced_at == now.isoformat()
