"""What a replica's fold costs when many small objects are folded, one after another or several at once.

The fold (spark_ops/fold.py) is one Spark SQL query per object; with a handful of rows its cost is Spark's fixed cost
per query (parsing, analysis, optimization, planning: Catalyst's tree rewrites on the driver), paid once per object
because every object's query differs by its columns. A run touching N small objects folds them one after another.
This measures what running the same folds from several threads of one process would give on this machine: the
driver's work of one query beside another's.

N generated custom objects (`Thing_001__c` ..., the emulator's describe()), one CREATE each, parsed by the platform's
parser; each fold is the platform's own (`from_arrow`, `fold_changes`, `to_arrow`: what `replication/apply.py
fold_rows` runs, without the Delta reads and commit), in one warm local Spark session. Per round and per number of
threads: seconds per object; the baseline is one thread (the platform today), in the same round.

    python -m bench.fold_threads [--objects 40] [--rounds 3] [--threads 1,2,3]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from bench.common import start_spark
from object_schema.describe import ObjectSchema
from resources.spark import from_arrow, to_arrow
from salesforce_emulator.custom_objects import custom_object
from salesforce_emulator.landing_lines import event
from spark_ops.fold import fold_changes
from spark_ops.parse import parse_lines, to_change_rows

T0 = 1_763_800_000_000


def inputs(spark, objects: int) -> list[tuple[ObjectSchema, pa.Table]]:
    """Each object's schema and its parsed change rows."""
    out = []
    for number in range(1, objects + 1):
        schema = ObjectSchema.from_describe(custom_object(number).describe())
        lines = spark.createDataFrame(
            [
                (
                    "bench",
                    1,
                    event(
                        schema.name,
                        "CREATE",
                        [f"a{number:02d}000000000001AAA"],
                        T0,
                        tx=f"tx-{number}",
                        replay=number,
                        Name=f"record {number}",
                    ),
                )
            ],
            "source_file string, source_line long, raw string",
        )
        out.append((schema, to_change_rows(parse_lines(lines, {schema.name: schema})).toArrow()))
    return out


def fold_one(spark, item: tuple[ObjectSchema, pa.Table]) -> int:
    schema, changes = item
    current = from_arrow(spark, schema.arrow_schema().empty_table())
    folded = to_arrow(fold_changes(from_arrow(spark, changes), current, schema), rows=changes.num_rows)
    return folded.num_rows


def seconds_per_object(spark, items: list, threads: int) -> float:
    started = time.perf_counter()
    if threads == 1:
        folded = [fold_one(spark, i) for i in items]
    else:
        with ThreadPoolExecutor(threads) as pool:
            folded = list(pool.map(lambda i: fold_one(spark, i), items))
    assert sum(folded) == len(items), "every object's fold returns its one record"
    return (time.perf_counter() - started) / len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2,3")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    start_spark()
    spark = SparkSession.getActiveSession()
    items = inputs(spark, args.objects)
    counts = [int(t) for t in args.threads.split(",")]
    for round_ in range(1, args.rounds + 1):
        figures = {t: seconds_per_object(spark, items, t) for t in counts}
        base = figures[counts[0]]
        print(
            json.dumps(
                {
                    "round": round_,
                    "objects": args.objects,
                    **{f"s_per_object_{t}_threads": round(s, 3) for t, s in figures.items()},
                    **{f"x_{t}_threads": round(base / s, 2) for t, s in figures.items()},
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
