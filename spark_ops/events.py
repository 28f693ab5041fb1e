"""Deduplication of canonical change rows by event identity (docs/design/contract.md §4)."""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import DataFrame, Window

DEDUP_KEY = ["event_key", "record_id"]


def mark_duplicates(rows: DataFrame) -> DataFrame:
    """Add `is_duplicate`: the event (identity + record) occurs earlier in this batch; the first occurrence (by file,
    then line) is kept. Events stored by earlier batches are found by ingest (replication/ingest.py), which reads
    their keys from change_events for the entities and commit times of the batch only."""
    first = Window.partitionBy(*DEDUP_KEY).orderBy("source_file", "source_line")
    return rows.withColumn("is_duplicate", F.row_number().over(first) > 1)
