"""Warm a long-lived Spark JVM up before the first run needs it.

A fresh JVM runs the platform's queries about twice as slowly as one that has run them before: the first pass
interprets and JIT-compiles Spark's and Jackson's own code (bench/RESULTS.md: a catch-up of 145k events takes
~22 s in a fresh JVM, ~11 s in the same JVM the second time; Janino's code generation is ~1.5 s of the gap). The
Spark Connect server (`resources.spark_connect`) is one JVM for every run, so its first runs (the backlog after a
restart) would pay that. `warm_up` runs the platform's own parse and fold, the same functions a run calls, over a
synthetic batch generated inside Spark (an object no org has: nothing is read or written but the JVM's code
caches), so the JIT has compiled those paths before a run arrives.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, SparkSession

from object_schema.describe import ObjectSchema
from spark_ops.datastream import parse_landed
from spark_ops.fold import FOLD_INPUT, fold_changes
from spark_ops.parse import landed_rows

log = logging.getLogger(__name__)

OBJECT = "CdcWarmUp__c"
# Every kind of value the parse checks (text, number, integer, boolean, date, datetime, time) and a compound
# address whose parts the parse flattens.
_ADDRESS = ("Street", "City", "PostalCode", "Latitude", "Longitude")
DESCRIBE = {
    "name": OBJECT,
    "fields": [
        {"name": "Id", "type": "id"},
        {"name": "IsDeleted", "type": "boolean"},
        {"name": "Name", "type": "string"},
        {"name": "Amount__c", "type": "currency"},
        {"name": "Count__c", "type": "int"},
        {"name": "Flag__c", "type": "boolean"},
        {"name": "Day__c", "type": "date"},
        {"name": "Opens__c", "type": "time"},
        {"name": "Notes__c", "type": "textarea"},
        *(
            {
                "name": f"Shipping{p}",
                "type": "double" if p in ("Latitude", "Longitude") else "string",
                "compoundFieldName": "ShippingAddress",
            }
            for p in _ADDRESS
        ),
        {"name": "ShippingAddress", "type": "address"},
        {"name": "LastModifiedDate", "type": "datetime"},
        {"name": "SystemModstamp", "type": "datetime"},
    ],
}
# Enough rows that the queries run as a catch-up's do (generated code, several partitions; resources/spark.py's
# few-row settings stop at 10,000), few enough to take seconds.
LINES = 40_000


@dataclass(frozen=True)
class WarmUp:
    lines: int
    changes: int
    quarantined: int
    records: int
    filled: tuple[str, ...]  # the object's columns that hold a value in some folded row
    seconds: float


def warm_up_lines(spark: SparkSession, lines: int) -> DataFrame:
    """`lines` CometD landing lines (`source_file, source_line, raw`) of `OBJECT`: each record created once, then
    updated, in commit order."""
    records = max(lines // 4, 1)
    return spark.range(lines).selectExpr(
        "'warm-up.jsonl' AS source_file",
        "id + 1 AS source_line",
        f"""to_json(named_struct('channel', '/data/{OBJECT.replace("__c", "__ChangeEvent")}', 'data', named_struct(
          'payload', named_struct(
            'ChangeEventHeader', named_struct(
              'entityName', '{OBJECT}', 'recordIds', array(concat('a0X', lpad(hex(id % {records}), 15, '0'))),
              'changeType', IF(id < {records}, 'CREATE', 'UPDATE'), 'changeOrigin', 'warm-up',
              'transactionKey', concat('warm-up-', id), 'sequenceNumber', 1,
              'commitTimestamp', 1700000000000 + id, 'commitNumber', id, 'commitUser', '005000000000001AAA',
              'nulledFields', IF(id % 7 = 0, array('Notes__c'), array()), 'diffFields', array(),
              'changedFields', array()),
            'Name', concat('Record ', id), 'Amount__c', round(id * 1.25, 2), 'Count__c', id % 1000,
            'Flag__c', id % 2 = 0, 'Day__c', date_format(date_add(DATE'2026-01-01', CAST(id % 300 AS int)),
                                                          'yyyy-MM-dd'),
            'Opens__c', '09:30:00.000Z', 'Notes__c', IF(id % 7 = 0, NULL, repeat('note ', CAST(id % 20 AS int))),
            'ShippingAddress', named_struct('Street', concat(id, ' Main St'), 'City', 'Springfield',
                                    'PostalCode', lpad(CAST(id % 99999 AS string), 5, '0'),
                                    'Latitude', 40.0 + (id % 100) / 1000, 'Longitude', -89.6),
            'LastModifiedDate', date_format(timestamp_millis(1700000000000 + id), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")),
          'event', named_struct('replayId', id)))) AS raw""",
    )


def warm_up(spark: SparkSession, lines: int = LINES) -> WarmUp:
    """Run the parse (landed rows to Arrow, as an ingest does) and the fold (to Arrow, as a replica step does) over
    `lines` synthetic lines; returns what they made, so a caller can tell the paths a run takes were taken."""
    started = time.perf_counter()
    schema = ObjectSchema.from_describe(DESCRIBE)
    landed = landed_rows(parse_landed(warm_up_lines(spark, lines), {OBJECT: schema}))
    rows = landed.toArrow()
    quarantined = sum(rows["quarantine"].to_pylist())
    # The fold's input is the parse again, inside Spark, not `rows` through `from_arrow`: on a server attached to a
    # cluster with no staging location those rows would travel inside the tasks (make test-cluster).
    changes = landed.where(~F.col("quarantine") & ~F.col("is_duplicate")).select(*FOLD_INPUT)
    current = spark.createDataFrame([], schema.spark_schema())
    folded = fold_changes(changes, current, schema).toArrow()
    filled = tuple(c for c, _ in schema.columns if folded[c].null_count < folded.num_rows)
    result = WarmUp(
        lines=lines,
        changes=rows.num_rows - quarantined,
        quarantined=quarantined,
        records=folded.num_rows,
        filled=filled,
        seconds=time.perf_counter() - started,
    )
    log.info(
        "Spark warmed up in %.1f s: %d synthetic lines parsed, %d records folded", result.seconds, lines, result.records
    )
    return result
