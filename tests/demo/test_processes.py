"""What the demo's children get and leave behind: files only their user reads, and only the secrets each needs.

`processes.start` runs every child (Dagster, the subscriber, the Spark Connect server) with umask 077: a child
started from a parent with the usual umask 022 still makes files 0600 and folders 0700, and its log is 0600 too.
The environments: Dagster's has the org, the salt and the Spark token; the subscriber's no Spark token; the Spark
Connect server's none of the platform's variables (its own process is read in tests/resources/test_spark_connect.py).
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from demo import processes
from object_schema.hashing import SALT_ENV
from resources import spark_connect

WRITE = "import os; open('landed.jsonl', 'w').write('{}'); os.mkdir('state')"


@pytest.fixture
def umask_022():
    """The parent's umask as on most systems, whatever the test runner's is."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_child_writes_files_only_its_user_reads(tmp_path, umask_022):
    log_file = tmp_path / "child.log"
    child = processes.start(
        [os.path.basename(sys.executable), "-c", WRITE], dict(os.environ), log_file=log_file, cwd=tmp_path
    )
    assert child.wait(timeout=60) == 0
    modes = {name: stat.S_IMODE((tmp_path / name).stat().st_mode) for name in ("landed.jsonl", "state", "child.log")}
    assert modes == {"landed.jsonl": 0o600, "state": 0o700, "child.log": 0o600}


def test_a_log_left_readable_by_an_earlier_session_is_made_private(tmp_path, umask_022):
    log_file = tmp_path / "dagster.log"
    log_file.write_text("earlier\n")
    log_file.chmod(0o644)
    child = processes.start(
        [os.path.basename(sys.executable), "-c", "print('now')"], dict(os.environ), log_file=log_file, cwd=tmp_path
    )
    assert child.wait(timeout=60) == 0
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600 and log_file.read_text() == "earlier\nnow\n"


def test_each_child_gets_only_the_secrets_it_uses(tmp_path, monkeypatch):
    for name, value in {
        "SF_CLIENT_SECRET": "s",
        "SF_PASSWORD": "p",
        SALT_ENV: "salt",
        "CDC_OTHER": "x",
        "DAGSTER_HOME": "/elsewhere",
        "SPARK_REMOTE": "sc://old",
    }.items():
        monkeypatch.setenv(name, value)
    org = {"SF_INSTANCE_URL": "https://example.my.salesforce.com", "SF_CLIENT_SECRET": "s"}
    remote = spark_connect.url(15002, "the-token")
    dagster = processes.platform_env(
        home=tmp_path,
        config=tmp_path / "r.yaml",
        landing=tmp_path / "l",
        warehouse=tmp_path / "w",
        org=org,
        extra={"SPARK_REMOTE": remote},
    )
    assert dagster["SF_CLIENT_SECRET"] == "s" and dagster[SALT_ENV] == "salt" and dagster["SPARK_REMOTE"] == remote
    assert "SF_PASSWORD" not in dagster and "CDC_OTHER" not in dagster  # only the org given, only the salt

    subscriber = processes.subscriber_env(dagster)
    assert subscriber["SF_CLIENT_SECRET"] == "s" and "SPARK_REMOTE" not in subscriber
    assert spark_connect.TOKEN_ENV not in subscriber

    server = processes.spark_connect_env("the-token")
    assert not [k for k in server if k.startswith(("SF_", "CDC_", "DAGSTER_"))] and "SPARK_REMOTE" not in server
    assert server[spark_connect.TOKEN_ENV] == "the-token" and server["PATH"] == os.environ["PATH"]


def test_a_spark_cluster_started_for_tests_takes_where_java_and_spark_are_and_no_secret():
    from demo.spark_cluster import CLUSTER_ENV, cluster_env

    parent = {"PATH": "/usr/bin", "JAVA_HOME": "/jvm", "SF_ACCESS_TOKEN": "t", "CDC_HASH_SALT": "s"}
    parent |= {"AWS_SECRET_ACCESS_KEY": "k", "SPARK_REMOTE": "sc://x", "CDC_SPARK_CONNECT_TOKEN": "c"}
    env = cluster_env(parent)
    assert {k: env[k] for k in ("PATH", "JAVA_HOME")} == {"PATH": "/usr/bin", "JAVA_HOME": "/jvm"}
    assert set(env) <= {*CLUSTER_ENV, "SPARK_LOCAL_IP", "SPARK_DAEMON_MEMORY", "PYSPARK_PYTHON"}
