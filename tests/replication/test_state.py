"""Checkpoint state (replication/state.py, resources/delta.py `commit_state`): found through its app transaction
whatever other writers commit after it; and the counts a replica reports are derived from its table
(replication/counts.py)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import apply_changes
from replication.closure import Cut
from replication.counts import dirty_count, row_count
from replication.ingest import IngestRun, ingest
from replication.run import ApplyRun
from replication.state import Held, IngestState, ReplicaState, ResyncPending
from resources.delta import CHANGE_EVENTS, HISTORY_SCAN, DeltaWarehouse
from resources.landing_zone import LandingZone
from salesforce_emulator.landing_lines import event

A1, A2, A3 = "001000000000001AAA", "001000000000002AAA", "001000000000003AAA"
T0 = 1_763_800_000_000
FOREIGN = HISTORY_SCAN + 10  # commits by other writers after the last state commit: more than table.history scans


def rows(ids: list[str], dirty: list[bool]) -> pa.Table:
    ts = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "Id": pa.array(ids),
            BUCKET_COLUMN: pa.array([i[:3] for i in ids]),
            "_sf_dirty_since": pa.array([1 if d else None for d in dirty], pa.int64()).cast(ts),
        }
    )


def foreign_commits(uri: str, n: int) -> None:
    """Commits carrying no state, as other writers make them: blind appends, a compaction, table properties."""
    empty = DeltaTable(uri).schema().to_arrow()
    for i in range(n):
        table = DeltaTable(uri)
        if i % 3 == 0:
            write_deltalake(table, pa.schema(empty).empty_table(), mode="append")
        elif i % 3 == 1:
            table.alter.set_table_properties({"other.tool.mark": str(i)}, raise_if_not_exists=False)
        else:
            table.optimize.compact()
            if DeltaTable(uri).version() == table.version():  # nothing to compact: still a foreign commit
                write_deltalake(table, pa.schema(empty).empty_table(), mode="append")


def test_the_state_is_found_after_more_foreign_commits_than_a_history_scan_reads(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    state = ReplicaState(
        applied_through=7,
        held=Held(transactions=["TX"], from_seq=6),
        resync_pending=ResyncPending(since="2026-01-01T00:00:00+00:00", from_seq=3, reason="overflow"),
    )
    warehouse.append(
        "T",
        rows([A1, A2], [True, False]),
        read=None,
        partition_by=[BUCKET_COLUMN],
        key=state.KEY,
        state=state.to_dict(),
        txns={"cdc_apply": 7},
    )
    warehouse.append(
        "T",
        rows([A3], [False]),
        read=warehouse.table("T"),
        partition_by=[BUCKET_COLUMN],
        key=state.KEY,
        state=state.to_dict(),
        txns={"cdc_apply": 7},
    )
    foreign_commits(warehouse.uri("T"), FOREIGN)
    table = warehouse.table("T")
    assert table.version() >= 1 + FOREIGN
    assert not any(state.KEY in c for c in table.history(HISTORY_SCAN))  # a scan of recent commits misses it
    assert ReplicaState.read(warehouse, table) == state


def test_a_state_commit_retried_past_a_foreign_commit_is_still_found(tmp_path):
    """delta-rs retries a commit that conflicts with nothing at the next free version: the app transaction then
    names the foreign commit before it, and the state is in the first commit after that carrying it."""
    warehouse = DeltaWarehouse(root=str(tmp_path))
    first = IngestState(ingest_seq=1)
    warehouse.append(
        "T", rows([A1], [False]), read=None, partition_by=None, key=first.KEY, state=first.to_dict(), txns={}
    )
    read = warehouse.table("T")
    write_deltalake(warehouse.uri("T"), rows([A2], [False]), mode="append")  # another writer, version 1
    second = IngestState(ingest_seq=2, entity_seq={"Account": 2})
    warehouse.append(
        "T", rows([A3], [False]), read=read, partition_by=None, key=second.KEY, state=second.to_dict(), txns={}
    )
    table = warehouse.table("T")
    assert table.version() == 2 and table.transaction_version(f"cdc_state.{second.KEY}") == 1
    assert IngestState.read(warehouse, table) == second


@pytest.mark.parametrize("stats", ["with statistics", "without statistics"])
def test_row_and_dirty_counts_come_from_the_table(tmp_path, stats):
    """From the Delta log's per-file statistics; files without them are counted from their data."""
    uri = str(tmp_path / "T")
    config = {"delta.dataSkippingNumIndexedCols": "0"} if stats == "without statistics" else None
    write_deltalake(uri, rows([A1, A2], [True, False]), partition_by=[BUCKET_COLUMN], configuration=config)
    write_deltalake(
        uri,
        rows(["003000000000001AAA", "003000000000002AAA", A3], [True, True, False]),
        mode="append",
        partition_by=[BUCKET_COLUMN],
    )
    table = DeltaTable(uri)
    actions = pa.table(table.get_add_actions(flatten=True))
    assert ("null_count._sf_dirty_since" in actions.column_names) == (stats == "with statistics")
    assert (row_count(table), dirty_count(table)) == (5, 3)
    assert (row_count(None), dirty_count(None)) == (0, 0)


def test_a_pending_resync_survives_foreign_commits_and_the_next_apply(tmp_path, spark, sample_dir):
    """The real ingest and apply: an overflow leaves a pending resync; other writers then commit more than
    `HISTORY_SCAN` commits to the replica; the next apply must still know the resync is pending (and keep it)."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse, zone = DeltaWarehouse(root=str(tmp_path / "warehouse")), LandingZone(path=str(landing))

    def land_and_apply(name: str, lines: list[str]) -> ReplicaState:
        (landing / name).write_text("\n".join(lines) + "\n")
        ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id=name))
        cut = Cut(
            through=IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)).ingest_seq, open_key=None, clock=""
        )
        return apply_changes(ApplyRun(spark, warehouse, schema, run_id=name), cut=cut).state

    first = land_and_apply(
        "a.jsonl",
        [event("Account", "CREATE", [A1], T0, Name="Acme"), event("Account", "GAP_OVERFLOW", ["001*"], T0 + 1000)],
    )
    assert first.resync_pending is not None
    foreign_commits(warehouse.uri("Account"), FOREIGN)
    second = land_and_apply("b.jsonl", [event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot")])
    assert second.resync_pending == first.resync_pending
    assert ReplicaState.read(warehouse, warehouse.table("Account")).resync_pending == first.resync_pending


def test_a_wide_replica_keeps_statistics_on_its_system_columns(tmp_path):
    """Past Delta's default 32 columns a replica's system columns would have no statistics: a new replica names
    them in `delta.dataSkippingStatsColumns`, so its dirty count needs no data read."""
    fields = [{"name": "Id", "type": "id"}, *({"name": f"F{i}__c", "type": "string"} for i in range(40))]
    schema = ObjectSchema.from_describe({"name": "Wide__c", "fields": fields})
    target = schema.arrow_schema()
    data = rows([A1, A2, A3], [True, False, True])
    data = pa.table(
        {f.name: data[f.name] if f.name in data.column_names else pa.nulls(3, f.type) for f in target}, schema=target
    )
    warehouse = DeltaWarehouse(root=str(tmp_path))
    state = ReplicaState()
    table = warehouse.append(
        "Wide__c",
        data,
        read=None,
        partition_by=[BUCKET_COLUMN],
        key=state.KEY,
        state=state.to_dict(),
        txns={},
        configuration=schema.table_properties(),
    )
    actions = pa.table(table.get_add_actions(flatten=True))
    assert "null_count._sf_dirty_since" in actions.column_names and "null_count.Id" in actions.column_names
    assert (row_count(table), dirty_count(table)) == (3, 2)
