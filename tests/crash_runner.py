"""Run one platform pass in a separate process (used by crash tests to SIGKILL a real run).

Usage: python tests/crash_runner.py <root> <describe_dir or -> <objects comma-separated> [apply|reconcile|resync|poll]

With `-` for describe_dir, describe() comes from the org named by the `SF_*` variables (SF_INSTANCE_URL,
SF_ACCESS_TOKEN, SF_CA_BUNDLE: e.g. an emulator the parent test serves), as in production. In `reconcile` or
`resync` mode every replica runs in that mode, as a run requested by the reconciliation sensor would (`poll` too).
`CRASH_RUNNER_OPTIONS` (JSON) adds replication.yaml options (either way); `CRASH_RUNNER_LANDING` /
`CRASH_RUNNER_WAREHOUSE` put the landing zone / warehouse elsewhere than under <root> (an object-store URI:
tests/cdc_assets/test_object_store_e2e.py).
"""

import json
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

import dagster as dg  # noqa: E402
from harness import Platform  # noqa: E402
from settings import TEST_SPARK_CONF  # noqa: E402

from cdc_assets.names import replica_key  # noqa: E402


def attach_to_running_jvm() -> None:
    """With PYSPARK_GATEWAY_PORT / PYSPARK_GATEWAY_SECRET set (by a parent test process), compute on the parent's
    Spark JVM and its SparkContext instead of starting a cold one: a crash test then costs seconds, not half a
    minute. A SIGKILL still kills everything that writes: Delta commits are made by delta-rs in this process; the
    JVM only computes, and holds nothing a later run reads."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway()
    spark = gateway.jvm.org.apache.spark
    jsc = spark.api.java.JavaSparkContext.fromSparkContext(spark.SparkContext.getOrCreate())
    SparkContext(gateway=gateway, jsc=jsc)


def kill_run(
    spark, root: Path, point: str, describe: str, objects: list[str], mode: str | None = None, env: dict | None = None
) -> None:
    """One platform pass in a subprocess (this script), SIGKILLed at `point`. The subprocess computes on the calling
    process's warm Spark JVM (`attach_to_running_jvm`); what it writes, it writes itself, and dies with it."""
    import signal
    import subprocess

    from settings import REPO

    gateway = spark.sparkContext._gateway.gateway_parameters
    env = {
        **os.environ,
        **(env or {}),
        "CDC_FAULT_POINT": point,
        "CDC_FAULT_ACTION": "kill",
        "PYSPARK_GATEWAY_PORT": str(gateway.port),
        "PYSPARK_GATEWAY_SECRET": gateway.auth_token,
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "crash_runner.py"),
            str(root),
            describe,
            ",".join(objects),
            *([mode] if mode else []),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=300,
    )
    spark.catalog.clearCache()  # what the dead run cached in the shared JVM
    assert proc.returncode == -signal.SIGKILL, f"{point} was not reached: {proc.stderr.decode()[-2000:]}"


def run_mode(platform: Platform, mode: str) -> dg.ExecuteInProcessResult:
    """One run of every asset, each replica in `mode`, every transaction closed (transaction_close_after 0)."""
    if mode == "apply":
        return platform.run(close_after=0, raise_on_error=False)
    ops = {
        replica_key(o).to_python_identifier(): {"config": {"mode": mode, "transaction_close_after": 0}}
        for o in platform.objects
    }
    return dg.materialize(
        platform.executable_assets(),
        resources=platform.defs.resources,
        instance=platform.instance,
        run_config={"ops": ops},
        raise_on_error=False,
    )


if __name__ == "__main__":
    root, describe_arg, objects = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",")
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        attach_to_running_jvm()
    mode = sys.argv[4] if len(sys.argv) > 4 else None
    where = {
        "landing_uri": os.environ.get("CRASH_RUNNER_LANDING"),
        "warehouse_uri": os.environ.get("CRASH_RUNNER_WAREHOUSE"),
    }
    if describe_arg == "-":
        from resources.salesforce import salesforce_resource_from_env

        platform = Platform(
            root,
            None,
            objects,
            TEST_SPARK_CONF,
            salesforce=salesforce_resource_from_env(),
            initial_load=True,
            **where,
            **json.loads(os.environ.get("CRASH_RUNNER_OPTIONS", "{}")),
        )
    else:
        platform = Platform(
            root,
            Path(describe_arg),
            objects,
            TEST_SPARK_CONF,
            **where,
            **json.loads(os.environ.get("CRASH_RUNNER_OPTIONS", "{}")),
        )
    if mode is None:
        platform.run()
    else:
        sys.exit(0 if run_mode(platform, mode).success else 1)
