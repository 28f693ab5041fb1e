"""One workload run the same way on a local Spark, on a Spark cluster and through a Spark Connect server attached to
it (tests/resources/test_spark_cluster.py), so that the replicas of the three can be compared row by row.

The sample stream (every kind of change, a gap, an overflow, a duplicate, a bad line), then thousands of Accounts
created and renamed: large enough that the landing lines and the replica's current rows (past 512 KiB of Arrow)
reach a Spark outside the run's process through the staging location (`resources.spark_staging`). Timestamps are
fixed, so every run of it makes the same rows.
"""

from __future__ import annotations

from pathlib import Path

from harness import Platform, comparable, load_lines, replica_rows

from salesforce_emulator.landing_lines import event

OBJECTS = ["Account", "Contact", "Opportunity"]
RECORDS = 3_000
CREATED_MS = 1_764_000_000_000  # 2025-11-24, after the sample stream


def run_workload(root: Path, sample_dir: Path, spark_conf: dict[str, str]) -> Platform:
    """Two landing runs with their asset checks (each must succeed); the platform, to read its tables."""
    platform = Platform(root, sample_dir / "describe", OBJECTS, spark_conf, close_after=0)
    ids = [f"001CL{i:010d}AAA" for i in range(RECORDS)]
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    platform.land(
        [
            event(
                "Account",
                "CREATE",
                [rid],
                CREATED_MS + i,
                tx=f"create-{i}",
                replay=10_000 + i,
                Name=f"Account {rid}",
                Description="x" * 300,
            )
            for i, rid in enumerate(ids)
        ]
    )
    assert platform.run(checks=True).success
    platform.land(
        [
            event(
                "Account",
                "UPDATE",
                [rid],
                CREATED_MS + 60_000 + i,
                tx=f"rename-{i}",
                replay=20_000 + i,
                Name=f"Renamed {rid}",
            )
            for i, rid in enumerate(ids)
        ]
    )
    assert platform.run(checks=True).success
    return platform


def replicas(root: Path) -> dict[str, dict[str, dict]]:
    """Every replica the workload made under `root` (the Platform's root), comparable across runs."""
    return {name: comparable(replica_rows(root / "warehouse", name)) for name in OBJECTS}
