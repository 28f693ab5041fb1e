"""Fold ordered change rows of one object into one net row per record (design §3, §5, §6).

The fold is what a loop over events would do, expressed as a few window and aggregate expressions so that Spark
runs it in one pass per record:

- **Guard.** A change at or before the row's position is never applied. The position is commit order (design §4):
  `_sf_commit_ts`, then `_sf_commit_number` and `_sf_sequence_number`; replay ids are not compared, since they
  differ between channels (the same change delivered twice has two). Over a
  snapshot or reconcile row it is *superseded* (the fetched state already includes it); over a CDC row it is
  *late*: it arrived after its record moved past it, so the record becomes dirty.
- **Dirty.** A gap event, a late event, or an UPDATE/DELETE for a record never seen makes the record dirty; the
  changes after that point (and every change while already dirty) are *skipped*: they stay in change_events for
  reconciliation.
- **Values.** A CREATE/UNDELETE resets the row (fields it does not carry become null); each column then takes the
  value of the last applied change that set it, explicit nulls included, or keeps the stored value. DELETE and
  UNDELETE flip `_sf_deleted`; field values survive a DELETE.

`fold_changes` returns the new full rows (only records that changed) plus per-record counters that the asset sums
into run metadata.
"""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import Column, DataFrame, Window

from spark_ops.schema import BUCKET_COLUMN, ObjectSchema, spark_type
from spark_ops.sql import literal, quote

RESETS = ("CREATE", "UNDELETE")
LIFECYCLE = ("CREATE", "UNDELETE", "DELETE")
PARTIAL = ("UPDATE", "DELETE")
COUNTERS = ("applied", "gaps", "late", "superseded", "dirty_skipped")
CHANGED = "_changed"
NEWLY_DIRTY = "newly_dirty"
INSERTED = "inserted"


def position(prefix: str = "") -> Column:
    """Commit order (design §4): commit timestamp, commit number, sequence number, replay id."""
    c = lambda n: F.col(prefix + n)  # noqa: E731
    return F.struct(c("commit_ts"), c("commit_number"), c("sequence_number"), F.coalesce(c("replay_id"), F.lit(0)).alias("replay_id"))


def bucket(schema: ObjectSchema, id_col: str = "Id") -> Column:
    """The layout column: a leading substring of the Id, so records created together share files (design §8)."""
    return F.substring(F.col(id_col), 1, schema.bucket_chars)


def classify(changes: DataFrame, current: DataFrame) -> DataFrame:
    """Per change row: whether it applies, is a gap, is late, is superseded, or is skipped because dirty."""
    guard = current.select(
        F.col("Id").alias("record_id"),
        F.col("_sf_commit_ts").alias("_cur_ts"),
        F.col("_sf_commit_number").alias("_cur_number"),
        F.col("_sf_sequence_number").alias("_cur_seq"),
        F.col("_sf_dirty_since").alias("_cur_dirty"),
        F.col("_sf_source").alias("_cur_source"),
        F.lit(True).alias("_exists"),
    )
    ts = F.col("commit_ts")
    at_or_before = (F.struct("commit_number", "sequence_number")
                    <= F.struct(F.col("_cur_number").alias("commit_number"), F.col("_cur_seq").alias("sequence_number")))
    # A snapshot or reconcile row has no commit number: anything committed at or before its SystemModstamp is in it.
    stale = F.col("_exists") & F.col("_cur_ts").isNotNull() & (
        (ts < F.col("_cur_ts")) | ((ts == F.col("_cur_ts")) & (F.col("_cur_number").isNull() | at_or_before)))
    per_record = Window.partitionBy("record_id")
    live_pos = F.when(F.col("_live"), F.col("_pos"))
    unknown_partial = ~F.col("_exists") & F.col("_first_type").isin(*PARTIAL)
    blocked_at = F.least(
        F.min(F.when(F.col("_live") & (F.col("_gap") | F.col("late")), F.col("_pos"))).over(per_record),
        F.when(unknown_partial, F.min(F.when(F.col("_live") & (F.col("_pos") > F.col("_first_pos")), F.col("_pos")))
               .over(per_record)),
    )
    live, gap, late = F.col("_live"), F.col("_gap"), F.col("late")
    return (
        changes.withColumn("_pos", position())
        .join(guard, "record_id", "left")
        .withColumns({
            "_exists": F.coalesce("_exists", F.lit(False)),
            "_stale": F.coalesce(stale, F.lit(False)),
            "_gap": F.col("change_type").startswith("GAP_"),
        })
        .withColumns({
            "superseded": F.col("_stale") & (F.col("_cur_source") != "cdc"),
            "_live": ~(F.col("_stale") & (F.col("_cur_source") != "cdc")),
        })
        .withColumns({
            "late": live & F.col("_stale") & ~gap,
            "_first_pos": F.min(live_pos).over(per_record),
            "_first_type": F.min_by("change_type", live_pos).over(per_record),
        })
        .withColumn("_blocked_at", blocked_at)
        .withColumn("applied", live & ~gap & ~late & F.col("_cur_dirty").isNull()
                    & (F.col("_blocked_at").isNull() | (F.col("_pos") < F.col("_blocked_at"))))
        .withColumns({
            "gaps": live & gap,
            "dirty_skipped": live & ~gap & ~late & ~F.col("applied"),
            "_dirty_from": F.when((live & (gap | late)) | (unknown_partial & (F.col("_pos") == F.col("_first_pos"))),
                                  F.col("commit_ts")),
        })
    )


def fold_changes(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Net new rows for the records `changes` touch, given their `current` replica rows (possibly none).

    `changes`: canonical change rows of `schema`'s object (no overflow rows, closed transactions only).
    `current`: replica rows (full columns) of at least the touched ids.
    Returns one full replica row per touched record, one column per name in `COUNTERS`, and `_changed`: whether
    the row differs from `current` (only those need writing; see `changed_rows`).
    """
    classified = classify(changes, current)
    reset_pos = F.max(F.when(F.col("applied") & F.col("change_type").isin(*RESETS), F.col("_pos"))) \
        .over(Window.partitionBy("record_id"))
    effective = F.col("applied") & (F.col("_reset_pos").isNull() | (F.col("_pos") >= F.col("_reset_pos")))
    folded = (
        classified.withColumn("_reset_pos", reset_pos)
        .withColumn("_effective", effective)
        .groupBy("record_id")
        .agg(
            _latest_values().alias("_values"),
            F.max(F.col("_reset_pos").isNotNull()).alias("_has_reset"),
            F.max_by(F.struct("change_type", "commit_ts"),
                     F.when(F.col("applied") & F.col("change_type").isin(*LIFECYCLE), F.col("_pos"))).alias("_life"),
            F.max_by(F.struct("commit_ts", "replay_id", "commit_number", "sequence_number"),
                     F.when(F.col("applied"), F.col("_pos"))).alias("_last"),
            F.min("_dirty_from").alias("_dirty_from"),
            *[F.sum(F.col(n).cast("long")).alias(n) for n in COUNTERS],
        )
    )
    return _merge_with_current(folded, current, schema)


def _latest_values() -> Column:
    """Per record: column name -> JSON text of the last effective change that set it (explicit nulls included).

    One narrow aggregate whatever the width of the object: the effective changes' (column, value) entries are
    collected, put in commit order and turned into a map in which the last entry of a key wins
    (`spark.sql.mapKeyDedupPolicy=LAST_WIN`). A struct-valued `max_by` per column did the same with one aggregate
    buffer per column, which forces a sort-based aggregate and generated code that grows with the object.
    """
    return F.expr(
        "map_from_entries(flatten(transform(array_sort(collect_list(CASE WHEN _effective THEN "
        "struct(_pos, transform(set_fields, c -> struct(c AS key, element_at(fields, c) AS value)) AS entries) "
        "END)), x -> x.entries)))")


def _merge_with_current(folded: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    cur = aligned(current, schema)
    cur = cur.selectExpr(*[f"{quote(c)} AS {quote('_cur_' + c)}" for c in cur.columns])
    j = folded.join(cur, folded["record_id"] == cur["_cur_Id"], "left")
    life = F.col("_life.change_type")
    values = [F.expr(
        f"CASE WHEN map_contains_key(_values, {literal(c)}) THEN {_typed_sql(c, t, '_values')} "
        f"WHEN _has_reset THEN NULL ELSE CAST({quote('_cur_' + c)} AS {spark_type(t).simpleString()}) END "
        f"AS {quote(c)}")
        for c, t in schema.columns if c != "Id"]
    system = [
        F.when(life == "DELETE", True).when(life.isNotNull(), False)
        .otherwise(F.coalesce(F.col("_cur__sf_deleted"), F.lit(False))).alias("_sf_deleted"),
        F.when(life == "DELETE", F.col("_life.commit_ts")).when(life.isNotNull(), F.lit(None))
        .otherwise(F.col("_cur__sf_deleted_at")).cast("timestamp").alias("_sf_deleted_at"),
        F.coalesce(F.col("_last.commit_ts"), F.col("_cur__sf_commit_ts")).alias("_sf_commit_ts"),
        F.when(F.col("_last").isNotNull(), F.col("_last.replay_id"))
        .otherwise(F.col("_cur__sf_replay_id")).cast("long").alias("_sf_replay_id"),
        F.when(F.col("_last").isNotNull(), F.col("_last.commit_number"))
        .otherwise(F.col("_cur__sf_commit_number")).cast("long").alias("_sf_commit_number"),
        F.when(F.col("_last").isNotNull(), F.col("_last.sequence_number"))
        .otherwise(F.col("_cur__sf_sequence_number")).cast("long").alias("_sf_sequence_number"),
        F.least(F.col("_cur__sf_dirty_since"), F.col("_dirty_from")).alias("_sf_dirty_since"),
        F.when(F.col("_last").isNotNull(), F.lit("cdc"))
        .otherwise(F.coalesce(F.col("_cur__sf_source"), F.lit("cdc"))).alias("_sf_source"),
        F.current_timestamp().alias("_sf_synced_at"),
        bucket(schema, "record_id").alias(BUCKET_COLUMN),
    ]
    changed = (F.col("applied") > 0) | (
        F.col("_dirty_from").isNotNull()
        & (F.col("_cur__sf_dirty_since").isNull() | (F.col("_dirty_from") < F.col("_cur__sf_dirty_since"))))
    newly_dirty = F.col("_dirty_from").isNotNull() & F.col("_cur__sf_dirty_since").isNull()
    inserted = changed & F.col("_cur_Id").isNull()
    return j.select(F.col("record_id").alias("Id"), *values, *system, *COUNTERS, changed.alias(CHANGED),
                    newly_dirty.alias(NEWLY_DIRTY), inserted.alias(INSERTED))


def aligned(rows: DataFrame, schema: ObjectSchema) -> DataFrame:
    """`rows` with exactly the replica columns of `schema`, in order; missing columns are null."""
    have = set(rows.columns)
    return rows.selectExpr(*[
        f"CAST({quote(f.name) if f.name in have else 'NULL'} AS {f.dataType.simpleString()}) AS {quote(f.name)}"
        for f in schema.spark_schema().fields
    ])


def _typed_sql(column: str, sf_type: str, values: str) -> str:
    """SQL for a column's value from a map of JSON text (an event's `fields`), cast to the replica type."""
    return f"CAST(element_at({values}, {literal(column)}) AS {spark_type(sf_type).simpleString()})"


def count_changes(classified_or_folded: DataFrame) -> dict[str, int]:
    """Sum of the per-record counters (one small action at the boundary)."""
    names = (*COUNTERS, NEWLY_DIRTY, INSERTED)
    row = classified_or_folded.agg(*[F.coalesce(F.sum(F.col(n).cast("long")), F.lit(0)).alias(n)
                                     for n in names]).first()
    return {n: int(row[n]) for n in names}


def changed_rows(folded: DataFrame, schema: ObjectSchema) -> DataFrame:
    """The rows of a fold result that must be written, with exactly the replica columns."""
    return folded.where(F.col(CHANGED)).select(*schema.spark_schema().fieldNames())
