"""Shared fixtures: one real local Spark session for the whole test run, the sample stream, temp warehouses."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import SAMPLE, TEST_SPARK_CONF


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql.utils import is_remote

    from resources.spark import spark_resource

    resource = spark_resource(TEST_SPARK_CONF)
    from dagster_pyspark.resources import spark_session_from_config

    spark = spark_session_from_config(resource.spark_config)
    if not is_remote():  # SPARK_REMOTE set: a client of a Spark Connect server (tests/resources/test_spark_connect.py)
        spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    assert SAMPLE.exists(), f"sample stream not found at {SAMPLE}; set CDC_SHARED to the shared/ folder"
    return SAMPLE
