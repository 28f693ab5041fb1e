"""Runs as clients of a Spark Connect server (`resources.spark_connect`, as `make run` and the e2e stack start it).

The golden sample and its asset checks, and a landing run of thousands of events, run through a real server, in a
separate pytest process: a process that has made a Connect session cannot go back to a local one, and this test
session's Spark is local. The server's log is then read: normal runs ship no rows inside its tasks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from demo import processes
from resources.spark import JVM_SQL_CONF, spark_config
from settings import REPO, TEST_SPARK_CONF

CLIENT_TESTS = [
    "tests/cdc_assets/test_golden.py",
    "tests/cdc_assets/test_checks.py::test_golden_sample_checks_run_with_the_materialization",
    "tests/resources/test_connect_client.py",
]


def test_a_connect_client_sets_only_session_settings():
    conf = spark_config({**TEST_SPARK_CONF, "spark.remote": "sc://localhost:15002"})
    assert conf["spark.remote"] == "sc://localhost:15002"
    assert conf["spark.sql.mapKeyDedupPolicy"] == "LAST_WIN" and conf["spark.sql.shuffle.partitions"] == "2"
    assert not [k for k in conf if k != "spark.remote" and not k.startswith("spark.sql.")]
    # static SQL settings are the server JVM's (a client setting one fails), and a local session has them
    assert not set(JVM_SQL_CONF) & set(conf) and JVM_SQL_CONF.items() <= spark_config(TEST_SPARK_CONF).items()


def test_golden_sample_and_checks_through_a_spark_connect_server(tmp_path):
    server, url = processes.start_spark_connect(
        tmp_path / "spark_connect.log", conf={"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "2"})
    try:
        client = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", *CLIENT_TESTS],
            env=os.environ | {"SPARK_REMOTE": url}, cwd=REPO, capture_output=True, text=True, timeout=900)
        warmed = _wait_for(tmp_path / "spark_connect.log", "Spark warmed up in", seconds=180)
    finally:
        processes.stop(server)
    summary = client.stdout.strip().splitlines()[-1] if client.stdout.strip() else client.stderr[-2000:]
    assert client.returncode == 0, client.stdout[-4000:]
    assert re.search(rf"\b{len(CLIENT_TESTS)} passed", summary) and "skipped" not in summary, summary
    log = (tmp_path / "spark_connect.log").read_text()
    assert "Spark Connect server listening at" in log
    # The server warmed its JVM up in the background while the client's runs went on (resources/spark_warm_up.py):
    # their results above are exact all the same.
    assert warmed and "warm-up failed" not in log, _lines_with(log, "warm")
    # Normal runs ship no rows inside Spark's tasks (resources.spark.from_arrow). Not asserted: the server's
    # occasional `INVALID_CURSOR.DISCONNECTED` stack trace (a result stream detached while its operation still ran),
    # seen once in four concurrent client runs under load and never in this test; its cause is not found yet.
    assert "task of very large size" not in log, _lines_with(log, "very large size")


def _wait_for(log_file, text: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while text not in log_file.read_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _lines_with(log: str, text: str) -> str:
    return "\n".join(line for line in log.splitlines() if text in line)[:2000]
