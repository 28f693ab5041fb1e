"""Shared fixtures: one real local Spark session for the whole test run, the sample stream, temp warehouses, a local
S3 server, a throwaway PostgreSQL cluster."""

from __future__ import annotations

import os
import shutil
import tempfile
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
    assert SAMPLE.exists(), f"sample stream not found at {SAMPLE}: it is part of the repository (samples/basic/)"
    return SAMPLE


@pytest.fixture(scope="session")
def s3():
    """A local S3 API for the session (moto's server on loopback, a random port: tests/s3_server.py), with the AWS_*
    variables pointing at it for delta-rs, pyarrow.fs and subprocesses; stopped, and the variables restored, at the
    end. `s3.new_bucket()` gives each test a bucket of its own."""
    from s3_server import s3_server

    with s3_server() as server:
        saved = {k: os.environ.get(k) for k in server.env()}
        os.environ.update(server.env())
        try:
            yield server
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL cluster for the session, made as `make run PG=1` makes its own (demo/postgres.py:
    initdb and pg_ctl, 127.0.0.1 on a free port, a generated password, 0700 folders): the `LocalPostgres`, whose
    `env()` gives the `DAGSTER_PG_*` variables of deploy/dagster-postgres.yaml. Stopped and removed at the end; a
    test wanting an instance of its own takes a database of its own (`demo.postgres.database`)."""
    from demo import postgres as pg
    from demo.processes import free_port

    try:
        pg.pg_tool("initdb"), pg.pg_tool("pg_ctl")
    except pg.PostgresMissing as exc:
        pytest.skip(f"no PostgreSQL server to start: {exc}")
    # Not under pytest's tmp folder: run as root, the server's account must pass through the folders above it.
    root = Path(tempfile.mkdtemp(prefix="sf-cdc-pg-"))
    try:
        cluster = pg.start(root, free_port())
        try:
            yield cluster
        finally:
            pg.stop(cluster)
    finally:
        shutil.rmtree(root, ignore_errors=True)
