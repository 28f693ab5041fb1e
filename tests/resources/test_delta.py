"""resources.delta: log checkpoints keep table loads cheap without changing what a table says; a second writer that
read the same version as the first fails its commit instead of applying twice."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from resources.delta import CHECKPOINT_EVERY, ConcurrentWriteError, DeltaWarehouse, merge_predicate, read_table

A, B, C = "001000000000001AAA", "001000000000002AAA", "003000000000003AAA"


def rows(ids: list[str], n: int) -> pa.Table:
    return pa.table(
        {"Id": pa.array(ids), "bucket": pa.array([i[:3] for i in ids]), "n": pa.array([n] * len(ids), pa.int64())}
    )


def test_a_checkpoint_every_few_commits_keeps_app_transactions_and_commit_state(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    rows = pa.table({"Id": pa.array(["001000000000001AAA"]), "n": pa.array([0], pa.int64())})
    warehouse.append("T", rows, read=None, partition_by=None, key="k", state={"step": 0}, txns={"app": 0})
    for step in range(1, CHECKPOINT_EVERY + 2):
        warehouse.upsert(
            "T",
            rows.set_column(1, "n", pa.array([step], pa.int64())),
            read=warehouse.table("T"),
            key_column="Id",
            partition_column="Id",
            partition_values=[],
            key="k",
            state={"step": step},
            txns={"app": step},
        )
    log = tmp_path / "T" / "_delta_log"
    assert (log / f"{CHECKPOINT_EVERY:020d}.checkpoint.parquet").exists()
    assert not list(log.glob(f"{CHECKPOINT_EVERY + 1:020d}.checkpoint*"))
    table = warehouse.table("T")
    assert table.version() == CHECKPOINT_EVERY + 1
    assert table.transaction_version("app") == CHECKPOINT_EVERY + 1
    assert warehouse.commit_state(table, "k") == {"step": CHECKPOINT_EVERY + 1}
    assert read_table(table).to_pylist() == [{"Id": "001000000000001AAA", "n": CHECKPOINT_EVERY + 1}]


def test_app_transactions_reads_every_id_once_as_transaction_version_answers_it(tmp_path):
    """One log pass (newest checkpoint + the JSON commits after it) gives what per-id lookups give: ingest asks it
    for every landing file (a per-id lookup each made a run's cost grow with the landing zone)."""
    warehouse = DeltaWarehouse(root=str(tmp_path))
    one = pa.table({"Id": pa.array([A]), "n": pa.array([0], pa.int64())})
    warehouse.append("T", one, read=None, partition_by=None, key="k", state={}, txns={"file:0": 1, "seq": 0})
    for step in range(1, CHECKPOINT_EVERY + 4):  # past a checkpoint, with commits after it
        warehouse.append(
            "T",
            one,
            read=warehouse.table("T"),
            partition_by=None,
            key="k",
            state={},
            txns={f"file:{step}": 1, "seq": step},
        )
    table = warehouse.table("T")
    assert (tmp_path / "T" / "_delta_log" / f"{CHECKPOINT_EVERY:020d}.checkpoint.parquet").exists()
    known = warehouse.app_transactions(table)
    assert known is not None and {k for k in known if not k.startswith("cdc_state.")} == {
        "seq",
        *(f"file:{step}" for step in range(CHECKPOINT_EVERY + 4)),
    }
    assert all(table.transaction_version(app) == version for app, version in known.items())
    assert known["seq"] == CHECKPOINT_EVERY + 3
    # A snapshot older than the newest checkpoint: its own commits, not the checkpoint's newer ones.
    old = DeltaTable(table.table_uri, version=2)
    assert warehouse.app_transactions(old) is None or warehouse.app_transactions(old)["seq"] == 2


@pytest.fixture
def warehouse(tmp_path) -> DeltaWarehouse:
    warehouse = DeltaWarehouse(root=str(tmp_path))
    warehouse.append(
        "T", rows([A, B], 0), read=None, partition_by=["bucket"], key="k", state={"by": "setup"}, txns={"apply": 1}
    )
    return warehouse


def snapshot(warehouse: DeltaWarehouse) -> tuple[int, int | None, dict, list[dict]]:
    table = warehouse.table("T")
    return (
        table.version(),
        table.transaction_version("apply"),
        warehouse.commit_state(table, "k"),
        sorted(read_table(table).to_pylist(), key=lambda r: r["Id"]),
    )


def test_a_second_merge_from_the_same_read_version_fails_and_leaves_the_first_writers_table(warehouse):
    first, second = warehouse.table("T"), warehouse.table("T")  # two runs read the checkpoint at version 0
    applied = first.transaction_version("apply")
    warehouse.upsert(
        "T",
        rows([A], 1),
        read=first,
        key_column="Id",
        partition_column="bucket",
        partition_values=["001"],
        key="k",
        state={"by": "first"},
        txns={"apply": applied + 1},
    )
    after_first = snapshot(warehouse)
    # Another partition: no data overlap, only the shared app transaction tells the two commits apart.
    with pytest.raises(
        ConcurrentWriteError,
        match=r"Delta table T: another writer committed to it \(now at "
        r"version 1\) after this run read it at version 0",
    ):
        warehouse.upsert(
            "T",
            rows([C], 2),
            read=second,
            key_column="Id",
            partition_column="bucket",
            partition_values=["003"],
            key="k",
            state={"by": "second"},
            txns={"apply": applied + 1},
        )
    first_rows = [{"Id": A, "bucket": "001", "n": 1}, {"Id": B, "bucket": "001", "n": 0}]
    assert snapshot(warehouse) == after_first == (1, 2, {"by": "first"}, first_rows)


def test_a_second_append_from_the_same_read_version_fails_and_appends_nothing(warehouse):
    first, second = warehouse.table("T"), warehouse.table("T")
    warehouse.append(
        "T",
        rows([C], 1),
        read=first,
        partition_by=["bucket"],
        key="k",
        state={"by": "first"},
        txns={"landing:a.jsonl": 1, "apply": 2},
    )
    after_first = snapshot(warehouse)
    with pytest.raises(ConcurrentWriteError, match="Re-running is safe"):
        warehouse.append(
            "T",
            rows([C], 1),
            read=second,
            partition_by=["bucket"],
            key="k",
            state={"by": "second"},
            txns={"landing:a.jsonl": 1, "apply": 2},
        )
    assert snapshot(warehouse) == after_first and len(after_first[3]) == 3


def test_a_second_overwrite_from_the_same_read_version_fails(warehouse):
    first, second = warehouse.table("T"), warehouse.table("T")
    warehouse.overwrite(
        "T",
        pa.RecordBatchReader.from_batches(rows([A], 0).schema, rows([A], 5).to_batches()),
        read=first,
        partition_by=["bucket"],
        key="k",
        state={"by": "first"},
        txns={"apply": 0},
    )
    after_first = snapshot(warehouse)
    with pytest.raises(ConcurrentWriteError):
        warehouse.overwrite(
            "T",
            pa.RecordBatchReader.from_batches(rows([B], 0).schema, rows([B], 6).to_batches()),
            read=second,
            partition_by=["bucket"],
            key="k",
            state={"by": "second"},
            txns={"apply": 0},
        )
    assert snapshot(warehouse) == after_first


def test_a_second_writer_creating_a_table_that_now_exists_fails(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    assert warehouse.table("T") is None  # both writers found no table
    warehouse.append("T", rows([A], 1), read=None, partition_by=["bucket"], key="k", state={}, txns={"apply": 1})
    with pytest.raises(ConcurrentWriteError, match="after this run found no table"):
        warehouse.append("T", rows([A], 1), read=None, partition_by=["bucket"], key="k", state={}, txns={"apply": 1})
    assert warehouse.table("T").version() == 0 and read_table(warehouse.table("T")).num_rows == 1


def test_writers_that_read_after_each_other_both_commit(warehouse):
    """Sequential runs (each reading the other's commit) are not conflicts."""
    for step in (1, 2):
        table = warehouse.table("T")
        warehouse.upsert(
            "T",
            rows([A], step),
            read=table,
            key_column="Id",
            partition_column="bucket",
            partition_values=["001"],
            key="k",
            state={"by": step},
            txns={"apply": table.transaction_version("apply") + 1},
        )
    assert snapshot(warehouse)[:3] == (2, 3, {"by": 2})


def test_an_overwrite_that_found_no_table_creates_it_once(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    for attempt in range(2):
        reader = pa.RecordBatchReader.from_batches(rows([A], 0).schema, rows([A], attempt).to_batches())
        if attempt == 0:
            warehouse.overwrite("T", reader, read=None, partition_by=["bucket"], key="k", state={}, txns={"apply": 0})
        else:
            with pytest.raises(ConcurrentWriteError, match="found no table"):
                warehouse.overwrite(
                    "T", reader, read=None, partition_by=["bucket"], key="k", state={}, txns={"apply": 0}
                )
    assert read_table(warehouse.table("T")).to_pylist() == [{"Id": A, "bucket": "001", "n": 0}]


def test_commit_rows_creates_then_commits_the_checkpoint_alone_then_merges_within_the_rows_partitions(tmp_path):
    """The one rule of every writer keeping rows by key: no table -> create; no rows -> an empty commit that still
    moves the checkpoint; rows -> a merge whose predicate names only the partitions of the rows written."""
    warehouse = DeltaWarehouse(root=str(tmp_path))
    commit = {"key_column": "Id", "partition_column": "bucket", "key": "k"}
    created = warehouse.commit_rows("T", rows([A, C], 0), read=None, state={"s": 0}, txns={"app": 0}, **commit)
    assert (created.version(), created.metadata().partition_columns) == (0, ["bucket"])
    empty = warehouse.commit_rows(
        "T", rows([A], 0).slice(0, 0), read=created, state={"s": 1}, txns={"app": 1}, **commit
    )
    assert (empty.version(), empty.transaction_version("app"), warehouse.commit_state(empty, "k")) == (1, 1, {"s": 1})
    merged = warehouse.commit_rows("T", rows([A, B], 2), read=empty, state={"s": 2}, txns={"app": 2}, **commit)
    assert sorted((r["Id"], r["n"]) for r in read_table(merged).to_pylist()) == [(A, 2), (B, 2), (C, 0)]
    assert merged.history(1)[0]["operation"] == "MERGE"
    assert merge_predicate("Id", "bucket", ["003", "001", "001"]) == "t.bucket IN ('001', '003') AND t.Id = s.Id"
    assert merge_predicate(["Id", "v"]) == "t.Id = s.Id AND t.v = s.v"
