"""resources.spark: Arrow tables into Spark without embedding large ones in the query plan (`from_arrow`); queries
over a few rows run with few-row settings (`small_query`, `to_arrow`)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError

from resources.spark import (
    JVM_OPTIONS,
    LOCAL_AUTH_CONF,
    LOCAL_RELATION_MAX_ROWS,
    LOOPBACK_DRIVER_CONF,
    SMALL_QUERY_CONF,
    SMALL_QUERY_MAX_ROWS,
    from_arrow,
    small_query,
    spark_config,
    to_arrow,
)


def _lines(n: int) -> pa.Table:
    return pa.table(
        {
            "source_line": pa.array(range(n), pa.int64()),
            "raw": pa.array([f'{{"line": {i}}}' for i in range(n)], pa.string()),
        }
    )


def _plan(df) -> str:
    return df._jdf.queryExecution().analyzed().toString()


def test_tables_of_many_small_rows_are_checkpointed_not_embedded_in_the_plan(spark):
    table = _lines(LOCAL_RELATION_MAX_ROWS + 1)
    df = from_arrow(spark, table)
    assert "LocalRelation" not in _plan(df)
    assert df.toArrow().sort_by("source_line").equals(table)


def test_large_tables_reach_a_local_spark_as_a_staged_parquet_file_not_rows_in_its_heap(spark):
    from resources.spark import STAGED_MIN_BYTES
    from resources.spark_staging import local_staging

    table = _lines(60_000)
    assert table.nbytes > STAGED_MIN_BYTES
    df = from_arrow(spark, table)
    plan = _plan(df)
    assert "LocalRelation" not in plan and "LogicalRDD" not in plan  # neither rows in the plan nor a checkpoint
    files = df.inputFiles()
    assert len(files) == 1 and files[0].endswith(".parquet") and local_staging().path in files[0]
    assert Path(local_staging().path).parent == Path(tempfile.gettempdir())
    assert df.toArrow().sort_by("source_line").equals(table)


def test_staged_tables_are_private_to_the_user_whatever_the_umask(spark, monkeypatch, tmp_path):
    import resources.spark_staging as staging

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(staging, "_local_staging", None)
    (tmp_path / "tmp").mkdir()
    previous = os.umask(0o022)  # the usual one: a file created without an explicit mode is readable by all
    try:
        local = staging.local_staging()
        assert staging.staged(spark, _lines(1000), local).count() == 1000
    finally:
        os.umask(previous)
    assert Path(local.path).parent == tmp_path / "tmp" and Path(local.path).stat().st_mode & 0o777 == 0o700
    [staged] = Path(local.path).glob("*.parquet")
    assert staged.stat().st_mode & 0o777 == 0o600


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


def _jobs(spark) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def _a_few_changes(spark, sample_dir):
    """Account's schema, a few change rows, one current row, and the fold's input size."""
    from object_schema.describe import ObjectSchema
    from salesforce_emulator.landing_lines import event
    from spark_ops.parse import parse_lines, to_change_rows

    account = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    a1, a2, t0 = "001000000000001AAA", "001000000000002AAA", 1_763_800_000_000
    lines = [
        event("Account", "CREATE", [a1], t0, Name="Acme", Rating="Cold"),
        event("Account", "UPDATE", [a1], t0 + 1000, Rating="Hot"),
        event("Account", "UPDATE", [a2], t0 + 2000, Industry="Retail"),
        event("Account", "DELETE", [a2], t0 + 3000),
    ]
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    changes = to_change_rows(parse_lines(df, {"Account": account}))
    base = {f.name: None for f in account.spark_schema().fields}
    current = spark.createDataFrame(
        [
            {
                **base,
                "Id": a2,
                "Name": "Old",
                "_sf_deleted": False,
                "_sf_source": "cdc",
                "_sf_bucket": a2[: account.bucket_chars],
            }
        ],
        account.spark_schema(),
    )
    return account, changes, current, len(lines) + 1


def _fold_of_a_few_changes(spark, sample_dir):
    """The fold (two joins, windows, an aggregate) of a few changes over one current row, and its input size."""
    from spark_ops.fold import fold_changes

    account, changes, current, rows = _a_few_changes(spark, sample_dir)
    return fold_changes(changes, current, account), rows


def _classes_compiled(spark) -> int:
    """Classes Spark has generated and compiled in this JVM (Janino; a class found in its cache is not counted)."""
    return spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


def test_a_fold_and_its_versions_over_new_rows_reuse_the_code_compiled_for_the_last(spark, sample_dir):
    """Nothing in the fold's or the history versions' query is a per-run constant (`_sf_synced_at` is stamped
    outside it: replication/records.py `stamped`), so a later run's plan is code the JVM already generated, compiled
    and optimized (with `current_timestamp()` in it, every run was new code: bench/RESULTS.md)."""
    from spark_ops.fold import fold_changes
    from spark_ops.history import transaction_versions

    def run():
        account, changes, current, _ = _a_few_changes(spark, sample_dir)
        return (
            fold_changes(changes, current, account).toArrow(),
            transaction_versions(changes, current, account).toArrow(),
        )

    first = run()
    compiled = _classes_compiled(spark)
    second = run()  # the same changes under new replay ids and transaction keys
    assert _classes_compiled(spark) == compiled
    assert [(t.schema, t.num_rows) for t in second] == [(t.schema, t.num_rows) for t in first] and first[1].num_rows
    assert "_sf_synced_at" not in first[0].column_names + first[1].column_names


def test_a_small_query_runs_as_one_job_with_the_same_result_and_restores_the_settings(spark, sample_dir):
    fold, rows = _fold_of_a_few_changes(spark, sample_dir)
    before = {key: spark.conf.get(key) for key in SMALL_QUERY_CONF}
    expected = fold.toArrow().sort_by("Id")
    jobs = _jobs(spark)
    assert to_arrow(fold, rows=rows).sort_by("Id").equals(expected)
    assert _jobs(spark) - jobs == 1  # without the settings: one more job per broadcast join
    assert {key: spark.conf.get(key) for key in SMALL_QUERY_CONF} == before


def test_a_query_over_many_rows_keeps_the_session_settings(spark):
    before = {key: spark.conf.get(key) for key in SMALL_QUERY_CONF}
    with small_query(spark, SMALL_QUERY_MAX_ROWS + 1):
        assert {key: spark.conf.get(key) for key in SMALL_QUERY_CONF} == before
    with small_query(spark, SMALL_QUERY_MAX_ROWS):
        assert {key: spark.conf.get(key) for key in SMALL_QUERY_CONF} == SMALL_QUERY_CONF
    assert {key: spark.conf.get(key) for key in SMALL_QUERY_CONF} == before


def test_the_jvm_the_platform_starts_collects_garbage_with_the_throughput_collector(spark):
    """`spark.driver.extraJavaOptions` reaches the JVM (the session fixture starts it from the platform's conf): its
    collectors are the Parallel ones, not JDK 17's default G1 (measured faster, bench/RESULTS.md)."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {beans.get(i).getName() for i in range(beans.size())}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def test_the_jvm_the_platform_starts_runs_with_its_jit_options(spark):
    """Every option of `JVM_OPTIONS` (the collector, the inlining budgets) is among the JVM's arguments."""
    args = set(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(JVM_OPTIONS) <= args, sorted(set(JVM_OPTIONS) - args)


def test_a_local_driver_listens_on_loopback_and_a_cluster_driver_where_the_operator_says(spark, monkeypatch):
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert LOOPBACK_DRIVER_CONF.items() <= spark_config().items()
    assert {spark.conf.get(key) for key in LOOPBACK_DRIVER_CONF} == {"127.0.0.1"}  # the test session's own driver
    cluster = spark_config({"spark.master": "spark://master:7077"})
    assert not set(LOOPBACK_DRIVER_CONF) & set(cluster)  # its executors connect back: docs/scaling.md
    chosen = spark_config({"spark.driver.host": "10.0.0.5"})
    assert chosen["spark.driver.host"] == "10.0.0.5"


def test_a_local_driver_refuses_a_local_client_without_its_secret(spark, monkeypatch):
    """Another user of the host reaches the driver's loopback port: as Spark's own RPC client without the secret
    Spark generated for this driver, it may not even look up an endpoint (the block manager's, whose blocks are the
    org's rows), where without `spark.authenticate` it would get one."""
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert LOCAL_AUTH_CONF.items() <= spark_config().items() and spark.conf.get("spark.authenticate") == "true"
    jvm = spark._jvm
    conf = jvm.org.apache.spark.SparkConf(False)  # nothing of the driver's settings, its secret least of all
    # SecurityManager's constructor takes its Scala defaults explicitly through py4j: no I/O key, the driver's file.
    defaults = jvm.java.lang.Class.forName("org.apache.spark.SecurityManager$").getField("MODULE$").get(None)
    manager = jvm.org.apache.spark.SecurityManager(
        conf, jvm.scala.Option.empty(), getattr(defaults, "$lessinit$greater$default$3")()
    )
    client = jvm.org.apache.spark.rpc.RpcEnv.create("intruder", "127.0.0.1", 0, conf, manager, True)
    driver = jvm.org.apache.spark.rpc.RpcAddress("127.0.0.1", int(spark.conf.get("spark.driver.port")))
    try:
        with pytest.raises(Py4JJavaError):
            client.setupEndpointRef(driver, "BlockManagerMaster")
    finally:
        client.shutdown()
