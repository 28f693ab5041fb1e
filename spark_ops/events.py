"""Deduplication of canonical change rows by event identity (design §4)."""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, Window


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
