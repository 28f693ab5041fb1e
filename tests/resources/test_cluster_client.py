"""Runs whose Spark is a cluster: run by tests/resources/test_spark_cluster.py in a process of its own (one kind of
Spark session per process), either as the cluster's driver (`spark.master=spark://...`) or as a client of a Spark
Connect server attached to it (`SPARK_REMOTE`); skipped in a plain test session.

The workload's replicas go to `CDC_CLUSTER_CLIENT_ROOT`, where that test compares them with a local run's. Large
tables must have gone through the staging location (`CDC_SPARK_STAGING`, which every executor sees), and a staging
location the executors do not see (`CDC_CLUSTER_PRIVATE`: the cluster's workers have their own, empty directory
there) must stop the run with a message that says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from cluster_workload import run_workload
from dagster_pyspark.resources import spark_session_from_config
from pyarrow import fs as pafs
from settings import TEST_SPARK_CONF

import resources.spark_staging as staging
from resources.spark import STAGED_MIN_BYTES, from_arrow, spark_resource

ROOT_ENV, CONF_ENV, PRIVATE_ENV = "CDC_CLUSTER_CLIENT_ROOT", "CDC_CLUSTER_SPARK_CONF", "CDC_CLUSTER_PRIVATE"

pytestmark = pytest.mark.skipif(not os.environ.get(ROOT_ENV), reason="a cluster client (test_spark_cluster.py)")


def _conf() -> dict[str, str]:
    return TEST_SPARK_CONF | json.loads(os.environ.get(CONF_ENV) or "{}")


def test_the_workload_runs_on_the_cluster_staging_large_tables_where_executors_read(sample_dir):
    run_workload(Path(os.environ[ROOT_ENV]), sample_dir, _conf())
    location = staging.staging_location()
    assert location is not None and location.configured
    staged = [
        i
        for i in location.filesystem.get_file_info(pafs.FileSelector(location.path))
        if i.base_name.endswith(".parquet")
    ]
    assert len(staged) >= 2, "the landing lines and the replica's rows should have been staged"
    assert location.uri in staging._proven


def test_a_staging_location_the_executors_do_not_see_stops_the_run_saying_so(monkeypatch):
    spark = spark_session_from_config(spark_resource(_conf()).spark_config)
    private = os.environ[PRIVATE_ENV]
    monkeypatch.setattr(staging, "_process_staging", None)
    monkeypatch.setenv(staging.STAGING_ENV, private)
    table = pa.table({"Id": [f"001{i:015d}" for i in range(20_000)], "Description": ["y" * 40] * 20_000})
    assert table.nbytes > STAGED_MIN_BYTES
    with pytest.raises(staging.StagingNotShared) as raised:
        from_arrow(spark, table)
    message = str(raised.value)
    assert f"CDC_SPARK_STAGING={private}" in message and "its executors read 0 of 8" in message, message
    assert "every Spark executor" in message
    assert staging.staging_location().uri not in staging._proven
