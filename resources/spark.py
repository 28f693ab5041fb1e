"""The Spark session: dagster-pyspark's `PySparkResource`, with defaults that suit CDC folding.

`local[*]` by default; any master by setting `spark.master` in `spark_config` (`SPARK_MASTER` overrides it without
code changes). With `SPARK_REMOTE=sc://host:port` every run is a client of a Spark Connect server instead, such as
the long-lived one of `resources.spark_connect` (one warm JVM for all runs), itself local or attached to a cluster
(`--conf spark.master=spark://...`). Off this process, large Arrow tables reach the executors through the staging
location of `resources.spark_staging` (`CDC_SPARK_STAGING`). The settings below are the ones
correctness depends on (UTC timestamps, map key de-duplication) plus small-job defaults (few shuffle partitions,
Arrow hand-off, no UI) and, with a local master, a driver that listens on loopback only (`LOOPBACK_DRIVER_CONF`) and
answers only its own executors (`LOCAL_AUTH_CONF`).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
import pyarrow as pa
from dagster_pyspark import PySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.utils import is_remote

from resources.deployment import DeploymentOwned
from resources.spark_staging import local_staging, staged, staging_location

# Required for correctness: session time zone and map-key policy are relied upon by spark_ops.
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # A stage whose generated code has a method over 4,000 bytes of bytecode runs as per-operator code instead (its
    # expressions split into small methods). HotSpot never compiles a method over 8,000 bytes, and one of 4-8 KB
    # costs its optimizing compiler seconds of a core, often after the loop it was compiled for has ended: the
    # fold's last stage (a cast per column of a wide object, 5.7-10 KB) is such a method. At 4,000 only that stage
    # falls back, and the catch-up is faster cold and warm (docs/design/decisions.md, "The JVM's settings").
    "spark.sql.codegen.hugeMethodLimit": "4000",
}
# Options of the JVM the platform starts, each chosen on the catch-up benchmark (docs/design/decisions.md, "The
# JVM's settings", has the figures):
JVM_OPTIONS = (
    # The throughput collector for a batch engine on few cores (JDK 17's default, G1, spends them on concurrent
    # marking): the catch-up is 7-9 % faster, cold, warm and at 1M events.
    "-XX:+UseParallelGC",
    # Smaller inlining budgets for HotSpot's optimizing compiler. On two cores the JIT competes with the tasks, and
    # every new query plan brings generated classes to compile: during a fold of a warm JVM the compiler threads
    # use 2-3x the CPU of Spark's tasks. With these limits the first pass of a fresh JVM is 10-16 % shorter and the
    # steady state no slower.
    "-XX:MaxInlineLevel=6",
    "-XX:InlineSmallCode=1000",
    "-XX:MaxInlineSize=20",
    "-XX:FreqInlineSize=100",
)
# Static settings of the SQL engine, read when the JVM starts: a Connect client cannot set them (`spark_config`).
JVM_SQL_CONF = {
    # Spark keeps the classes it generates for a plan in a cache and reuses them (with the machine code the JIT made
    # of them) when the same plan comes again. The catch-up of five objects generates ~116 classes: with the default
    # 100 entries each run evicts what the next one needs, and a warm JVM (the Spark Connect server) generates,
    # compiles and optimizes 71-75 classes again every run. With room for them it compiles none, and a second
    # catch-up in one JVM is ~12 % faster (docs/design/decisions.md, "The JVM's settings").
    "spark.sql.codegen.cache.maxEntries": "1000",
}
DEFAULT_CONF = {
    "spark.master": "local[*]",
    "spark.app.name": "salesforce-cdc",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    # The 1M-event catch-up takes the same wall time at 2g as at 4g, and the JVM fills whatever it is given (peak
    # RSS 3.9 GB against 6.0 GB). Raise it for very wide objects or larger ingest batches.
    "spark.driver.memory": "2g",
    # Applies to the JVM this process starts (a local session, the Spark Connect server); a cluster's executors keep
    # their own settings. See `JVM_OPTIONS`.
    "spark.driver.extraJavaOptions": " ".join(JVM_OPTIONS),
    "spark.sql.ansi.enabled": "false",
    **JVM_SQL_CONF,
    **REQUIRED_CONF,
}
# With a local master the driver is all of Spark (its executors are threads of the same JVM), so nothing off this
# machine needs its RPC and block-manager ports: they listen on loopback. Spark's default is the address the host's
# name resolves to, or, when that is loopback, the first other interface's: reachable from the network, with no
# authentication (`spark.authenticate` is off). A cluster master's executors must reach the driver: there the
# operator chooses (docs/scaling.md).
LOOPBACK_DRIVER_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
# Loopback is still open to every user of the host: without authentication any of them may call the driver's RPC
# endpoints and fetch its blocks (the org's rows, shuffled). With a local master Spark generates the secret itself,
# in memory, when `spark.authenticate` is on (SecurityManager.initializeAuth): no secret to hand out, none on a
# command line, and the executors, threads of the same JVM, hold it already.
LOCAL_AUTH_CONF = {"spark.authenticate": "true"}


def spark_config(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The platform's Spark settings with `overrides`. With a Spark Connect URL (`spark.remote`, or `SPARK_REMOTE`
    in the environment) the session is a client of that server."""
    conf = dict(DEFAULT_CONF)
    if master := os.environ.get("SPARK_MASTER"):
        conf["spark.master"] = master
    conf |= overrides or {}
    if conf["spark.master"].startswith("local"):
        conf = LOOPBACK_DRIVER_CONF | LOCAL_AUTH_CONF | conf
    if "spark.remote" in conf or os.environ.get("SPARK_REMOTE"):
        # A Connect client sets session (SQL) settings only; master, memory and the rest are the server's.
        return {
            k: v
            for k, v in conf.items()
            if (k.startswith("spark.sql.") and k not in JVM_SQL_CONF) or k == "spark.remote"
        }
    return conf


class SparkResource(DeploymentOwned, PySparkResource):
    """dagster-pyspark's resource, its session made on first use; a Spark Connect session is released when the
    process ends. Its `spark_config` (the master or `spark.remote`, jars, JVM options) is the deployment's
    (resources/deployment.py).

    On first use, not when the run starts: a poll, describe or formula run writes through delta-rs and never asks
    for the session, and a local one is a JVM of its own (seconds of CPU and half a gigabyte per run, paid every
    poll cycle). A Connect session lives on the server until released (or idle for `spark_connect.CONNECT_CONF`'s
    timeout), with everything it cached. A run is one process, so its session goes with it. (Not in a teardown
    hook: that would make this a context-manager resource, which sensors and `build_*_context` then need to enter.)
    """

    DEPLOYMENT_FIELDS = frozenset({"spark_config"})

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        pass  # the session is made by the first step that asks for it (`spark_session`)

    @property
    def spark_session(self) -> Any:
        if self._spark_session is None:
            self._spark_session = spark_session_from_config(self.spark_config)
            if is_remote():
                atexit.register(self._spark_session.stop)
        return self._spark_session


def spark_resource(overrides: dict[str, str] | None = None) -> SparkResource:
    return SparkResource(spark_config=spark_config(overrides))


def session(resource: PySparkResource) -> SparkSession:
    """The resource's session with the settings correctness depends on applied (an existing session may lack them)."""
    spark = resource.spark_session
    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
    return spark


# Above this many rows a small Arrow table is handed to a local Spark through a local checkpoint (see `from_arrow`).
LOCAL_RELATION_MAX_ROWS = 5_000
# Above this many bytes an Arrow table reaches Spark as a Parquet file in a staging location (see `from_arrow`):
# Spark warns from 1,000 KiB a task, and a local relation's rows travel inside its tasks, in as many as there are
# cores; a checkpoint holds them in the JVM's heap.
STAGED_MIN_BYTES = 512 * 1024


def from_arrow(spark: SparkSession, table: pa.Table) -> DataFrame:
    """An Arrow table as a DataFrame.

    `createDataFrame` makes a LocalRelation: every row lives inside the query plan, and every analysis, cache
    lookup and temp view walks it (17-41 s of plan building for 40,000 landing lines, against 1.6-2.9 s from a
    checkpoint; the whole parse takes half the time), and every task scanning it carries its share of the rows
    (Spark warns: "task of very large size").

    So past `STAGED_MIN_BYTES` the table is written as Parquet where Spark's executors read it
    (`resources.spark_staging`) and the plan only names the file: no rows in the plan, in the tasks or in the
    JVM's heap, nothing a session can lose. With a local Spark that is this process's temporary directory
    (`local_staging`; against a checkpoint of the same rows in the heap, the 1M-event catch-up is 12 % faster with
    18 % less peak memory, bench/RESULTS.md). When Spark is outside this process (a Spark Connect client, or a
    cluster master) it is `CDC_SPARK_STAGING`, proven shared once per process, else a clear `StagingNotShared`.
    (As a Connect client a checkpoint is a DataFrame cached in the server session by id, and runs under the daemon
    can fail with `CONNECT_INVALID_PLAN.DATAFRAME_NOT_FOUND` on such DataFrames once batches pass the threshold.)
    With no staging location the rows go in the plan, checkpointed on a cluster's executors. Smaller tables past `LOCAL_RELATION_MAX_ROWS` are checkpointed (stored once in the block manager);
    small ones stay in the plan, which saves that extra job.
    """
    if not table.num_rows:  # Spark Connect cannot take the schema from an empty Arrow table
        return spark.createDataFrame([], from_arrow_schema(table.schema))
    remote = is_remote()
    if table.nbytes > STAGED_MIN_BYTES and not any(pa.types.is_null(f.type) for f in table.schema):
        # (Parquet has no column of type null)
        staging = local_staging() if not remote and _local_master(spark) else staging_location()
        if staging is not None:
            return staged(spark, table, staging)
    if remote:
        return spark.createDataFrame(table)
    df = spark.createDataFrame(table)
    return df.localCheckpoint() if table.num_rows > LOCAL_RELATION_MAX_ROWS else df


# A query whose inputs hold at most this many rows runs with `SMALL_QUERY_CONF` (see `small_query`).
SMALL_QUERY_MAX_ROWS = 10_000
SMALL_QUERY_CONF = {
    # One job: a broadcast join first collects its small side in a job of its own (the fold has two joins).
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    # One task per stage: a few rows gain nothing from being spread over partitions.
    "spark.sql.shuffle.partitions": "1",
    # No Java code generated and compiled for a plan that runs once over a few rows (each object's fold is a plan
    # of its own). Expressions are interpreted, as Spark itself does whenever generated code fails to compile.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@contextmanager
def small_query(spark: SparkSession, rows: int) -> Iterator[None]:
    """Run the queries inside with `SMALL_QUERY_CONF` when their inputs hold at most `SMALL_QUERY_MAX_ROWS` rows
    (`rows`); the session's own settings are restored after.

    Why: with the session's settings a replica step with a handful of changes pays ~1 s for its fold, nearly all
    of it fixed cost per query (three jobs, code generation and compilation for a plan used once, a task per
    shuffle partition), not rows; bench/step.py measures it. None of these settings changes what a query returns. The settings are read when a
    query is planned and run, so the action (`toArrow`, `collect`) must be inside. Above the limit nothing changes:
    generated code pays for itself over many rows.
    """
    if rows > SMALL_QUERY_MAX_ROWS:
        yield
        return
    before = {key: spark.conf.get(key) for key in SMALL_QUERY_CONF}
    for key, value in SMALL_QUERY_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, setting in before.items():
            spark.conf.set(key, setting)  # type: ignore[arg-type]  # get() without a default returns str or raises


def to_arrow(df: DataFrame, *, rows: int) -> pa.Table:
    """`df` as Arrow, run as a small query (`small_query`) when its inputs hold at most `SMALL_QUERY_MAX_ROWS`
    rows (`rows`)."""
    with small_query(df.sparkSession, rows):
        return df.toArrow()


def _local_master(spark: SparkSession) -> bool:
    master = spark.sparkContext.master
    assert master is not None, "a running SparkContext always has a master URL"
    return master.startswith("local")
