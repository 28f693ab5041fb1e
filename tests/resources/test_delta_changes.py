"""resources.delta_changes: a Delta table's change rows read from its log and files are the rows delta-rs' own
Change Data Feed reader (`load_cdf`) gives, and both readers hand out at most `batch_rows` rows at a time even from
a row group many times that size."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from resources.delta import DeltaWarehouse, read_table
from resources.delta_changes import change_batches, change_files, change_rows, change_schema, snapshot_batches


def rows(ids: list[str], bucket: str, n: int, **extra) -> pa.Table:
    return pa.table(
        {
            "Id": ids,
            "Name": [f"{i} {n}" for i in ids],
            "n": pa.array([n] * len(ids), pa.int64()),
            "bucket": [bucket] * len(ids),
            **{k: [v] * len(ids) for k, v in extra.items()},
        }
    )


def merge(warehouse: DeltaWarehouse, data: pa.Table) -> None:
    warehouse.upsert(
        "Account",
        data,
        read=warehouse.table("Account"),
        key_column="Id",
        partition_column="bucket",
        partition_values=data["bucket"].to_pylist(),
        key="k",
        state={},
        txns={},
    )


def load_cdf(table, first: int, last: int) -> pa.Table:
    return pa.RecordBatchReader.from_stream(table.load_cdf(starting_version=first, ending_version=last)).read_all()


def ordered(table: pa.Table) -> list[dict]:
    rows = table.drop_columns(["_commit_timestamp"]).to_pylist()
    return sorted(rows, key=lambda r: (r["_commit_version"], r["_change_type"], r["Id"]))


def test_change_rows_are_the_rows_load_cdf_gives_through_merges_a_new_column_compaction_and_an_overwrite(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    odd = "y"
    warehouse.append(
        "Account",
        pa.concat_tables([rows(["A", "B"], "x", 0), rows(["C"], odd, 0)]),
        read=None,
        partition_by=["bucket"],
        key="k",
        state={},
        txns={},
    )
    merge(warehouse, pa.concat_tables([rows(["A"], "x", 1), rows(["D"], odd, 1)]))  # 1: update + insert
    merge(warehouse, rows(["B"], "x", 2, Extra="new"))  # 2: a column added by the merge
    warehouse.table("Account").optimize.compact()  # 3: files rewritten, no data changed
    replacement = pa.concat_tables([rows(["A", "C"], "x", 4, Extra="e"), rows(["E"], odd, 4, Extra="e")])
    warehouse.overwrite(
        "Account",
        pa.RecordBatchReader.from_batches(replacement.schema, replacement.to_batches()),
        read=warehouse.table("Account"),
        partition_by=["bucket"],
        key="k",
        state={},
        txns={},
    )  # 4
    table = warehouse.table("Account")
    assert table.version() == 4
    for first, last in [(1, 4), (1, 1), (3, 3), (4, 4)]:
        files = change_files(table, first, last)
        ours = pa.Table.from_batches(list(change_batches(table, files, 2)), change_schema(table))
        theirs = load_cdf(table, first, last)
        assert ours.column_names == theirs.column_names
        assert ordered(ours) == ordered(theirs.cast(ours.schema)) and change_rows(table, files) == ours.num_rows
    assert {r["_change_type"] for r in ordered(ours)} == {"insert", "delete"}  # the overwrite: files out, files in
    assert change_files(table, 3, 3) == []  # compaction: dataChange false
    assert {r["bucket"] for r in ordered(ours)} == {"x", odd}


def test_a_partition_value_the_log_url_encodes_is_read_from_its_files(tmp_path):
    """delta-rs 1.6's `load_cdf` encodes such a path twice and fails to find the file; this reader decodes it."""
    warehouse = DeltaWarehouse(root=str(tmp_path))
    odd = "a b/c%d=é"
    warehouse.append("Account", rows(["A"], odd, 0), read=None, partition_by=["bucket"], key="k", state={}, txns={})
    merge(warehouse, rows(["A"], odd, 1))
    table = warehouse.table("Account")
    changes = pa.Table.from_batches(list(change_batches(table, change_files(table, 1, 1), 10)))
    assert sorted((r["_change_type"], r["Name"], r["bucket"]) for r in changes.to_pylist()) == [
        ("update_postimage", "A 1", odd),
        ("update_preimage", "A 0", odd),
    ]
    assert [(r["Id"], r["bucket"]) for r in pa.Table.from_batches(list(snapshot_batches(table, 10))).to_pylist()] == [
        ("A", odd)
    ]


def test_both_readers_hand_out_at_most_batch_rows_from_a_row_group_many_times_larger(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    ids = [f"001{i:05d}" for i in range(1000)]
    warehouse.append("Account", rows(ids, "x", 0), read=None, partition_by=["bucket"], key="k", state={}, txns={})
    data = rows(ids, "x", 1)
    warehouse.overwrite(
        "Account",
        pa.RecordBatchReader.from_batches(data.schema, data.to_batches()),
        read=warehouse.table("Account"),
        partition_by=["bucket"],
        key="k",
        state={},
        txns={},
    )
    table = warehouse.table("Account")
    (path,) = table.file_uris()
    assert pq.ParquetFile(path).metadata.num_row_groups == 1  # one row group of 1,000 rows

    scan = list(snapshot_batches(table, 64))
    assert max(b.num_rows for b in scan) <= 64 and len(scan) >= 1000 // 64
    assert pa.Table.from_batches(scan).sort_by("Id").to_pylist() == read_table(table).sort_by("Id").to_pylist()

    changes = list(change_batches(table, change_files(table, 1, 1), 64))
    assert max(b.num_rows for b in changes) <= 64
    kinds = pa.Table.from_batches(changes)["_change_type"].value_counts().to_pylist()
    assert sorted((k["values"], k["counts"]) for k in kinds) == [("delete", 1000), ("insert", 1000)]
