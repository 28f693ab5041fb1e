"""The platform on a Spark cluster: a standalone master and two workers (demo/spark_cluster.py, from PySpark's own
launcher), used by runs directly (`spark.master=spark://...`) and through a Spark Connect server attached to it.
The replicas of both must equal a local run's of the same workload (tests/cluster_workload.py).

Each cluster client is a pytest process of its own (tests/resources/test_cluster_client.py): a process holds one
kind of Spark session, and this test session's is local. Large tables reach the executors through a shared staging
directory; the workers also have a directory of their own that the drivers do not see (a private mount), and a
staging location there must fail, in both kinds of client, with a message that says so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_workload import replicas, run_workload
from settings import REPO, TEST_SPARK_CONF

from demo import processes
from demo.spark_cluster import can_unshare, start_spark_cluster

CLIENT = "tests/resources/test_cluster_client.py"

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not can_unshare(), reason=("the workers' unshared directory needs a mount namespace (root and `unshare`)")
    ),
]


SECRET = "a-token-the-cluster-must-not-see"


@pytest.fixture(autouse=True)
def _only_when_asked(request):
    """Minutes long (three Spark drivers, two workers): `make test-cluster` (`pytest -m cluster`), which CI runs
    after `make test`; a plain `pytest` run skips it."""
    if "cluster" not in (request.config.option.markexpr or ""):
        pytest.skip("the Spark cluster test runs with -m cluster (make test-cluster)")


def _client(root: Path, env: dict[str, str]) -> None:
    """Run the cluster client tests in a process of their own; both must pass."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_MASTER")} | env
    client = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", CLIENT],
        env=env | {"CDC_CLUSTER_CLIENT_ROOT": str(root)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = client.stdout.strip().splitlines()[-1] if client.stdout.strip() else client.stderr[-2000:]
    assert client.returncode == 0 and re.search(r"\b2 passed", summary) and "skipped" not in summary, client.stdout[
        -6000:
    ]


def test_replicas_on_a_spark_cluster_equal_a_local_run(tmp_path, spark, sample_dir, monkeypatch):
    shared, private = tmp_path / "shared", tmp_path / "private"
    monkeypatch.setenv("SF_ACCESS_TOKEN", SECRET)  # the org's token in the starting process: never the cluster's
    cluster = start_spark_cluster(tmp_path / "cluster", workers=2, private=private)
    try:
        for child in cluster.children:  # the master and the workers (the workers' JVMs replaced `unshare` and `sh`)
            environ = Path(f"/proc/{child.pid}/environ").read_bytes()
            assert SECRET.encode() not in environ and b"SF_ACCESS_TOKEN" not in environ
        _client(
            tmp_path / "direct",
            {
                "CDC_CLUSTER_SPARK_CONF": json.dumps(cluster.client_conf()),
                "CDC_SPARK_STAGING": str(shared),
                "CDC_CLUSTER_PRIVATE": str(private),
            },
        )
        server, url = processes.start_spark_connect(
            tmp_path / "spark_connect.log",
            conf=cluster.client_conf() | {"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "2"},
        )
        try:
            _client(
                tmp_path / "connect",
                {"SPARK_REMOTE": url, "CDC_SPARK_STAGING": shared.as_uri(), "CDC_CLUSTER_PRIVATE": private.as_uri()},
            )
        finally:
            processes.stop(server)
        state = cluster.state()
        apps = [a["id"] for a in state["completedapps"] + state["activeapps"]]
        by_worker = cluster.executors_by_worker()
    finally:
        cluster.stop()
    # Both drivers (the direct client, the Connect server) ran executors on both workers.
    assert len(apps) == 2 and all(set(apps) <= worker for worker in by_worker), (apps, by_worker)

    run_workload(tmp_path / "local", sample_dir, TEST_SPARK_CONF)
    local, direct, connect = (replicas(tmp_path / kind) for kind in ("local", "direct", "connect"))
    assert len(local["Account"]) > 3_000 and local["Contact"]
    assert direct == local
    assert connect == local
    log = (tmp_path / "spark_connect.log").read_text()
    assert "task of very large size" not in log
