"""Deduplication, transaction closing and overflow detection over canonical change rows (design §4, §5, §7)."""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, Window

from spark_ops.fold import position

DEDUP_KEY = ["event_key", "record_id"]


def mark_duplicates(rows: DataFrame, known_keys: DataFrame) -> DataFrame:
    """Add `is_duplicate`: the event (identity + record) was seen earlier in this batch or is already stored.

    Within the batch the first occurrence (by file, then line) is kept; `known_keys` holds `DEDUP_KEY` of rows
    already in change_events.
    """
    first = Window.partitionBy(*DEDUP_KEY).orderBy("source_file", "source_line")
    known = known_keys.select(*DEDUP_KEY).distinct().withColumn("_known", F.lit(True))
    return (rows.withColumn("_occurrence", F.row_number().over(first))
                .join(known, DEDUP_KEY, "left")
                .withColumn("is_duplicate", (F.col("_occurrence") > 1) | F.col("_known").isNotNull())
                .drop("_occurrence", "_known"))


def newest_event(rows: DataFrame) -> dict | None:
    """The newest event in commit order: its transaction key and position as
    `[commit micros, commit number, sequence number, replay id]` (one small action)."""
    pos = position()
    as_ints = F.array(F.unix_micros(pos["commit_ts"]), pos["commit_number"], pos["sequence_number"], pos["replay_id"])
    row = rows.select(F.max_by(F.struct(F.col("transaction_key"), as_ints.alias("p")), pos).alias("n")).first()
    if row is None or row["n"] is None:
        return None
    return {"transaction_key": row["n"]["transaction_key"], "position": list(row["n"]["p"])}


def is_overflow() -> F.Column:
    """GAP_OVERFLOW, or a record id ending in '*' (a key-prefix wildcard): the whole object needs a resync."""
    return (F.col("change_type") == "GAP_OVERFLOW") | F.col("record_id").endswith("*")
