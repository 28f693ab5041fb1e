"""resources.spark.from_arrow: Arrow tables into Spark without embedding large ones in the query plan."""

from __future__ import annotations

import pyarrow as pa

from resources.spark import LOCAL_RELATION_MAX_ROWS, from_arrow


def _lines(n: int) -> pa.Table:
    return pa.table({"source_line": pa.array(range(n), pa.int64()),
                     "raw": pa.array([f'{{"line": {i}}}' for i in range(n)], pa.string())})


def _plan(df) -> str:
    return df._jdf.queryExecution().analyzed().toString()


def test_large_tables_are_checkpointed_not_embedded_in_the_plan(spark):
    table = _lines(LOCAL_RELATION_MAX_ROWS + 1)
    df = from_arrow(spark, table)
    assert "LocalRelation" not in _plan(df)
    assert df.toArrow().sort_by("source_line").equals(table)


def test_small_tables_stay_local_relations(spark):
    table = _lines(10)
    df = from_arrow(spark, table)
    assert "LocalRelation" in _plan(df)
    assert df.toArrow().sort_by("source_line").equals(table)
