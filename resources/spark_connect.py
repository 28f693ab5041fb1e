"""A Spark Connect server with the platform's settings: one long-lived, warm JVM that every run connects to.

Under the Dagster daemon every run is a new process. With a local master each one starts its own JVM and pays
its start and JIT warm-up again (bench/RESULTS.md, steady state: a run of ~1,000 events in a fresh process
against the same run as a client of a warm server). `python -m resources.spark_connect [--port 15002]` starts the
server; runs use it when `SPARK_REMOTE=sc://localhost:15002` is set. `make run` does both.

Once listening, the server warms its JVM up (`resources.spark_warm_up`: the platform's parse and fold over a
synthetic batch, in the background, ~11 s of both cores here) so that the first runs after a start, the backlog
that piled up while it was down, do not pay the JIT's first pass; `--warm-up-lines 0` skips it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from pyspark.sql import SparkSession

from resources.spark import DEFAULT_CONF, spark_config
from resources.spark_warm_up import LINES, warm_up

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002
CONNECT_CONF = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    # A run killed before it released its session leaves it (and what it cached) behind until it idles out.
    "spark.connect.session.manager.defaultSessionTimeout": "10min",
}


def url(port: int = DEFAULT_PORT, host: str = "localhost") -> str:
    return f"sc://{host}:{port}"


def start(port: int = DEFAULT_PORT, overrides: dict[str, str] | None = None) -> SparkSession:
    """Start the server in this process (a local Spark session with the Connect plugin) and return its session."""
    os.environ.pop("SPARK_REMOTE", None)  # this process is the server, not a client
    conf = spark_config({"spark.master": DEFAULT_CONF["spark.master"], **CONNECT_CONF,
                         "spark.connect.grpc.binding.port": str(port), **(overrides or {})})
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _warm_up(spark: SparkSession, lines: int) -> None:
    """`warm_up` in the background: runs connecting meanwhile share the cores with it; if it fails, the server
    serves on unwarmed (a warning says why)."""
    try:
        warm_up(spark, lines)
    except Exception as exc:  # noqa: BLE001 - a warm-up is an optimisation, never a reason to stop serving
        log.warning("Spark warm-up failed (the server serves on, unwarmed): %s", str(exc).splitlines()[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m resources.spark_connect", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    parser.add_argument("--warm-up-lines", type=int, default=LINES, metavar="N",
                        help=f"synthetic lines the JVM is warmed up with once listening (default {LINES:,}; 0: none)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spark = start(args.port, dict(c.split("=", 1) for c in args.conf))
    log.info("Spark Connect server listening at %s (Spark %s)", url(args.port), spark.version)
    if args.warm_up_lines > 0:
        threading.Thread(target=_warm_up, args=(spark, args.warm_up_lines), name="warm-up", daemon=True).start()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    spark.stop()


if __name__ == "__main__":
    main()
