"""spark_ops.order: commit order, declared once; its Spark SQL and Arrow forms agree (docs/design/contract.md §4)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pyarrow as pa

from object_schema.describe import SYSTEM_COLUMNS
from resources.spark import from_arrow
from spark_ops.fold import FOLD_INPUT
from spark_ops.order import COMMIT_ORDER, ROW_POSITION, arrow_order, arrow_positions, position_sql

TS = pa.timestamp("us", tz="UTC")
CHANGES = pa.schema(
    [
        ("record_id", pa.string()),
        ("commit_ts", TS),
        ("commit_number", pa.int64()),
        ("sequence_number", pa.int64()),
        ("replay_id", pa.int64()),
    ]
)


def changes(n: int = 200, seed: int = 5) -> pa.Table:
    """Rows whose positions tie on every prefix of the order and hold nulls in each nullable column, but no two
    alike (a null replay id reads 0, so it never meets a 0)."""
    rnd = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n:
        key = (
            datetime.fromtimestamp(1_763_800_000 + rnd.randint(0, 5), UTC),
            rnd.choice([None, 1, 2, 9_223_372_036_854_775_807]),
            rnd.choice([None, 1, 2, 3]),
            rnd.choice([None, 1, 5, 7]),
        )
        if key not in seen:
            seen.add(key)
            rows.append({"record_id": f"r{len(rows):04d}", **dict(zip(CHANGES.names[1:], key))})
    return pa.Table.from_pylist(rows, schema=CHANGES)


def spark_order(spark, rows: pa.Table, descending: bool = False) -> list[str]:
    """Record ids of `rows` sorted by the SQL form of the position, Spark's own struct comparison."""
    from_arrow(spark, rows).createOrReplaceTempView("order_rows")
    direction = "DESC" if descending else "ASC"
    query = f"SELECT record_id FROM order_rows ORDER BY {position_sql()} {direction}"
    return [r["record_id"] for r in spark.sql(query).collect()]


def test_the_arrow_order_is_the_spark_order(spark):
    rows = changes()
    arrow = rows["record_id"].take(arrow_order(rows)).to_pylist()
    assert arrow == spark_order(spark, rows)
    newest_first = rows["record_id"].take(arrow_order(rows, descending=True)).to_pylist()
    assert newest_first == spark_order(spark, rows, descending=True)
    assert newest_first == arrow[::-1]


def test_the_kept_position_orders_replica_rows_as_their_changes(spark):
    """A replica row keeps its last change's position in `_sf_commit_ts`, `_sf_commit_number`,
    `_sf_sequence_number`: ordered by those, rows come in the order of their changes, replay id left out."""
    rows = changes(seed=11)
    kept = pa.table(
        {"Id": pa.array(["001"] * rows.num_rows), **{k.row_column: rows[k.column] for k in ROW_POSITION}}
    ).append_column("record_id", rows["record_id"])
    no_replay = rows.set_column(
        rows.schema.get_field_index("replay_id"), "replay_id", pa.nulls(rows.num_rows, pa.int64())
    )
    by_kept = kept["record_id"].take(arrow_order(kept, group_by=["Id"], kept=True)).to_pylist()
    assert by_kept == no_replay["record_id"].take(arrow_order(no_replay)).to_pylist()


def test_a_null_sorts_first_and_a_null_replay_id_reads_zero():
    rows = pa.Table.from_pylist(
        [
            {
                "record_id": "b",
                "commit_ts": datetime(2025, 1, 1, tzinfo=UTC),
                "commit_number": 1,
                "sequence_number": 1,
                "replay_id": None,
            },
            {
                "record_id": "a",
                "commit_ts": datetime(2025, 1, 1, tzinfo=UTC),
                "commit_number": None,
                "sequence_number": 9,
                "replay_id": 3,
            },
        ],
        schema=CHANGES,
    )
    assert rows["record_id"].take(arrow_order(rows)).to_pylist() == ["a", "b"]
    assert [p[1:] for p in arrow_positions(rows)] == [[1, 1, 0], [None, 9, 3]]


def test_the_order_names_change_columns_the_fold_reads_and_system_columns_a_row_keeps():
    assert {k.column for k in COMMIT_ORDER} <= set(FOLD_INPUT)
    assert [k.row_column for k in ROW_POSITION] == ["_sf_commit_ts", "_sf_commit_number", "_sf_sequence_number"]
    assert {k.row_column for k in ROW_POSITION} <= {name for name, _ in SYSTEM_COLUMNS}
