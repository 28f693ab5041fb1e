"""Landing formats: parsing Datastream lines into canonical change rows, and what per-file format detection costs
a CometD-only landing (spark_ops/datastream.py).

One emulator org (`accounts` accounts with contacts and opportunities) and `changes` workload transactions; the
same org is written as CometD lines (every transaction's events) and as Datastream lines (a backfill of every
record plus a `salesforce-cdc` image per changed record). Each figure is the median of three full evaluations
(`noop` write of the change rows and the quarantine rows) on a warm Spark session:

- `cometd parse_lines`: the CometD parser alone (what ingest ran before Datastream files were accepted);
- `cometd parse_landed`: the same lines through format detection (the baseline is the row above);
- `datastream parse_landed`: Datastream lines, detection included.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from bench.common import figures, median, start_spark
from salesforce_emulator import Emulator
from salesforce_emulator.datastream import MixedLanding, backfill_lines
from salesforce_emulator.workload import Workload

OBJECTS = ["Account", "Contact", "Opportunity"]


def _lines(accounts: int, changes: int) -> tuple[list[str], list[str], dict]:
    with tempfile.TemporaryDirectory() as tmp, Emulator(Path(tmp) / "org") as emu:
        workload = Workload(emu, seed=3)
        workload.build_org(
            accounts=accounts, contacts_per_account=2, opportunities_per_account=1, cases_per_account=0, leads=0
        )
        landing = MixedLanding(emu.store, OBJECTS, datastream_share=0.0, both_share=1.0, seed=3)
        emu.store.add_listener(landing)
        workload.run(changes=changes)
        datastream = backfill_lines(emu.store, OBJECTS, random.Random(3)) + landing.datastream
        describes = {o: emu.store.describe(o) for o in OBJECTS}
        return landing.cometd, datastream, describes


def _timed(spark, parse, lines: list[str], schemas) -> float:
    from spark_ops.parse import quarantined, to_change_rows

    frame = spark.createDataFrame(
        [("f.jsonl", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    ).cache()
    frame.count()
    walls = []
    for _ in range(3):
        started = time.perf_counter()
        parsed = parse(frame, schemas).cache()
        to_change_rows(parsed).write.format("noop").mode("overwrite").save()
        quarantined(parsed).write.format("noop").mode("overwrite").save()
        walls.append(time.perf_counter() - started)
        parsed.unpersist()
    frame.unpersist()
    return median(walls)


def run(accounts: int = 2_000, changes: int = 20_000) -> list[dict]:
    from pyspark.sql import SparkSession

    from object_schema.describe import ObjectSchema
    from spark_ops.datastream import parse_landed
    from spark_ops.parse import parse_lines

    cometd, datastream, describes = _lines(accounts, changes)
    start_spark()
    spark = SparkSession.getActiveSession()
    schemas = {o: ObjectSchema.from_describe(d) for o, d in describes.items()}
    plain = _timed(spark, parse_lines, cometd, schemas)
    detected = _timed(spark, parse_landed, cometd, schemas)
    images = _timed(spark, parse_landed, datastream, schemas)
    return [
        figures(workload="cometd parse_lines", unit="lines", count=len(cometd), wall_s=plain),
        figures(workload="cometd parse_landed", unit="lines", count=len(cometd), wall_s=detected, baseline_s=plain),
        figures(workload="datastream parse_landed", unit="lines", count=len(datastream), wall_s=images),
    ]
