"""resources.spark.from_arrow: Arrow tables into Spark without embedding large ones in the query plan."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

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
    import resources.spark_staging as staging

    monkeypatch.setattr(staging, "_process_staging", None)
    monkeypatch.delenv(staging.STAGING_ENV, raising=False)
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example.com:15002")
    assert staging.staging_location() is None  # a server elsewhere cannot read this machine's files

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    (tmp_path / "tmp").mkdir()
    mine = f"{staging.STAGING_PREFIX}{socket.gethostname()}-"
    dead = tmp_path / "tmp" / f"{mine}999999999-abc"  # above any pid: a dead process's
    other_host = tmp_path / "tmp" / f"{staging.STAGING_PREFIX}elsewhere-999999999-abc"  # a machine sharing the mount
    dead.mkdir(), other_host.mkdir()
    local = staging.staging_location()
    assert not local.configured and Path(local.path).parent == tmp_path / "tmp" and local.uri == local.path
    assert Path(local.path).name.startswith(f"{mine}{os.getpid()}-") and Path(local.path).is_dir()
    assert not dead.exists() and other_host.exists()

    monkeypatch.setattr(staging, "_process_staging", None)
    monkeypatch.setenv(staging.STAGING_ENV, (tmp_path / "shared").as_uri())  # a URI: file:// here, s3a:// etc. there
    monkeypatch.setenv("SPARK_REMOTE", "sc://spark.example.com:15002")
    shared = staging.staging_location()
    assert shared.configured and Path(shared.path).parent == tmp_path / "shared"
    assert shared.uri == f"{(tmp_path / 'shared').as_uri()}/{Path(shared.path).name}"
