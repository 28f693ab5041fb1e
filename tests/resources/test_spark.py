"""resources.spark.from_arrow: Arrow tables into Spark without embedding large ones in the query plan."""

from __future__ import annotations

import os
import tempfile

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


def test_a_connect_client_stages_tables_only_where_its_server_reads(monkeypatch, tmp_path):
    import resources.spark as spark_resource

    monkeypatch.setattr(spark_resource, "_process_staging", None)
    monkeypatch.delenv(spark_resource.STAGING_ENV, raising=False)
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example.com:15002")
    assert spark_resource.staging_dir() is None  # a server elsewhere cannot read this machine's files

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    (tmp_path / "tmp").mkdir()
    dead = tmp_path / "tmp" / f"{spark_resource.STAGING_PREFIX}999999999-abc"  # above any pid: a dead process's
    dead.mkdir()
    local = spark_resource.staging_dir()
    assert local.parent == tmp_path / "tmp"
    assert local.name.startswith(f"{spark_resource.STAGING_PREFIX}{os.getpid()}-")
    assert not dead.exists()

    monkeypatch.setattr(spark_resource, "_process_staging", None)
    monkeypatch.setenv(spark_resource.STAGING_ENV, str(tmp_path / "shared"))
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example.com:15002")
    assert spark_resource.staging_dir().parent == tmp_path / "shared"
