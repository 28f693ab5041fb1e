"""Paths and Spark settings shared by tests (a plain module: `conftest` names differ per folder)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "samples" / "basic"  # the golden stream and its expected state (samples/basic/README.md)

TEST_SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "false",
}
