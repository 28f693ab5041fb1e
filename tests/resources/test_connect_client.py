"""A landing run of a few thousand events as a Spark Connect client, run by tests/resources/test_spark_connect.py in a
process of its own against a real server, whose log that test then reads (skipped in a local-Spark session).

The batch is large enough that its landing lines, and on the second run the replica's current rows, would travel
to the server inside the query plan and from there inside Spark's tasks as local relations ("task of very large
size"): `resources.spark.from_arrow` hands them over as Parquet files instead.
"""

from __future__ import annotations

import os
import time

import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from salesforce_emulator.landing_lines import event

pytestmark = pytest.mark.skipif(
    not os.environ.get("SPARK_REMOTE"), reason="a Spark Connect client (tests/resources/test_spark_connect.py)"
)

RECORDS = 4_000


def test_a_landing_run_of_thousands_of_events_as_a_connect_client(tmp_path, sample_dir):
    platform = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0)
    ids = [f"001{i:012d}AAA" for i in range(RECORDS)]
    now = int(time.time() * 1000)
    platform.land([event("Account", "CREATE", [rid], now, Name=f"Account {rid}", Description="x" * 300) for rid in ids])
    assert platform.run(checks=True).success
    platform.land([event("Account", "UPDATE", [rid], now + 1000, Name=f"Renamed {rid}") for rid in ids])
    assert platform.run(checks=True).success

    rows = platform.rows("Account")
    assert len(rows) == RECORDS
    assert {r["Name"] for r in rows.values()} == {f"Renamed {rid}" for rid in ids}
    assert {r["Description"] for r in rows.values()} == {"x" * 300}
