"""A standalone Spark cluster on loopback for tests and benchmarks: a master and workers started from PySpark's own launcher.

`spark-class org.apache.spark.deploy.master.Master` and `... worker.Worker` from the pyspark package's `bin/`
(the same JVM classes `sbin/start-master.sh` runs in a Spark distribution), each a child in its own session so
that stopping it reaches the executors it started. One core and little memory per worker.

A worker can be given a directory it must not share with the driver (`private`): it then runs in a mount namespace
of its own (`unshare --mount`, needs root) with an empty tmpfs over that path, so it and its executors see another
directory there than the driver does, as two machines each with their own disk would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from demo import processes

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
WORKER_MEMORY = "768m"
EXECUTOR_MEMORY = "512m"  # Spark's floor is 450 MiB (300 MiB reserved x 1.5)


@dataclass
class SparkCluster:
    master_url: str
    web_url: str
    worker_web_urls: list[str]
    logs: Path
    children: list[subprocess.Popen] = field(default_factory=list)

    def client_conf(self) -> dict[str, str]:
        """What a driver (a run's session, or a Spark Connect server) needs to use this cluster from loopback."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
        }

    def state(self) -> dict:
        return _json(f"{self.web_url}/json/")

    def executors_by_worker(self) -> list[set[str]]:
        """For each worker, the application ids it has run executors for (running or finished)."""
        states = [_json(f"{url}/json/") for url in self.worker_web_urls]
        return [{e["appid"] for e in s.get("executors", []) + s.get("finishedexecutors", [])} for s in states]

    def stop(self) -> None:
        for child in reversed(self.children):
            processes.stop(child, grace_seconds=10)


# What the master and the workers take from the environment of the process that starts them: where Java, Spark and
# Python are, and the locale. Nothing else: not the org's credentials, the hash salt, a Spark Connect token or a
# storage key (`SF_*`, `CDC_*`, `AWS_*`), which executors never need (the driver hands them the data).
CLUSTER_ENV = ("PATH", "HOME", "JAVA_HOME", "SPARK_HOME", "LANG", "LC_ALL", "TMPDIR")


def cluster_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the cluster's processes (`CLUSTER_ENV` of `environ`, and Spark's own settings)."""
    kept = {k: v for k in CLUSTER_ENV if (v := environ.get(k)) is not None}
    return kept | {"SPARK_LOCAL_IP": HOST, "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable}


def can_unshare() -> bool:
    """Whether this process may make mount namespaces (root, with `unshare` installed)."""
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


def start_spark_cluster(
    root: Path, workers: int = 2, private: Path | None = None, timeout_seconds: float = 600.0
) -> SparkCluster:
    """A master and `workers` workers, once every worker has registered; with `private`, each worker sees its own
    empty directory at that path (see the module docstring)."""
    root.mkdir(parents=True, exist_ok=True)
    env = cluster_env(os.environ)
    port, web_port = processes.free_port(), processes.free_port()
    cluster = SparkCluster(f"spark://{HOST}:{port}", f"http://{HOST}:{web_port}", [], root)
    try:
        cluster.children.append(
            _start(
                [str(SPARK_CLASS), MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(web_port)],
                env,
                root / "master.log",
            )
        )
        _wait(cluster, lambda state: state["status"] == "ALIVE", "the master", timeout_seconds)
        for i in range(workers):
            worker_web_port = processes.free_port()
            command = [
                str(SPARK_CLASS),
                WORKER_CLASS,
                "--host",
                HOST,
                "--cores",
                "1",
                "--memory",
                WORKER_MEMORY,
                "--work-dir",
                str(root / f"worker-{i}"),
                "--webui-port",
                str(worker_web_port),
                cluster.master_url,
            ]
            if private is not None:
                private.mkdir(parents=True, exist_ok=True)
                command = [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    'mount -t tmpfs not-shared "$0" && exec "$@"',
                    str(private),
                    *command,
                ]
            cluster.children.append(_start(command, env, root / f"worker-{i}.log"))
            cluster.worker_web_urls.append(f"http://{HOST}:{worker_web_port}")
        _wait(cluster, lambda state: state["aliveworkers"] == workers, f"{workers} workers", timeout_seconds)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start(command: list[str], env: dict[str, str], log_file: Path) -> subprocess.Popen:
    """`command` in its own session with `processes.PRIVATE_UMASK` (executors write shuffle files of the org's
    rows), output to `log_file`."""
    out = processes.private_log(log_file)
    try:
        return subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=processes.PRIVATE_UMASK,
        )
    finally:
        os.close(out)


def _wait(cluster: SparkCluster, ready, what: str, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if exited := [c for c in cluster.children if c.poll() is not None]:
            raise RuntimeError(
                f"{exited[0].args[:3]} exited with code {exited[0].returncode} while waiting for "
                f"{what}; logs in {cluster.logs}"
            )
        try:
            if ready(cluster.state()):
                return
        except (OSError, ValueError):
            pass  # the master's web UI is not up yet, or up with its JSON handler not yet attached (an HTML page)
        time.sleep(0.5)
    raise TimeoutError(f"{what} of the Spark cluster not ready within {timeout_seconds:.0f} s; logs in {cluster.logs}")


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())
