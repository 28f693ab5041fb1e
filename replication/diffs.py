"""Text diffs resolved just before the fold, in apply and in history backfill (docs/design/contract.md §3).

A change row whose `diff_fields` names a replicated column still holds `{"diff": ...}` there. Before the fold, the
diffs are replaced with the new text: one Spark query over the change rows of the records that carry a diff gives
each row with whether the fold applies it (`spark_ops.fold.with_applied`: guard, dirty records, unknown records: the
fold's own steps, so the two never disagree) and its record's stored values of the fields concerned; the driver then
walks each record's applied changes in commit order (spark_ops/order.py) and patches them
(`replication.unified_diff.resolve_record`). Diff rows are rare, so only the records that have one take this path;
every other row passes through untouched.

Why the patching runs on the driver and not in a Python UDF inside the fold's plan: there is no Spark built-in for
applying a unified diff, and a UDF would need this project's code importable by every Spark executor (a cluster's,
a Spark Connect server's Python workers), where today they need none. The rows concerned are few: they come back
to the driver once and go to Spark once, beside the apply's one Spark input of the changes (`resolve_frame_diffs`).

A diff that cannot be resolved (no stored value, record not in the replica, hash mismatch, hunks that do not
match) turns its change into `GAP_<type>`: the fold marks the record dirty at that commit, it is counted among
`gaps`, and reconciliation fetches the record. A warning names the record, the field and why.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pyspark.sql.functions as F
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from object_schema.describe import ObjectSchema, spark_type
from replication.unified_diff import resolve_record
from resources.printable import printable
from resources.spark import from_arrow, to_arrow
from spark_ops.fold import APPLIED, FOLD_INPUT, with_applied
from spark_ops.order import arrow_order

# The warnings belong in the run's event log, where operators look: Dagster captures its own logger's children
# (`dagster.get_dagster_logger` names them so).
log = logging.getLogger(f"dagster.builtin.{__name__}")

DIFF_COUNTS = ("diffs_applied", "diffs_unresolved")
# The columns of a change row the fold and the diff resolution read: what the apply hands to Spark, once.
RESOLVE_INPUT = (*FOLD_INPUT, "diff_fields")
_STORED_ID, _STORED = "_stored_id", "_stored"


def diff_records(changes: pa.Table, schema: ObjectSchema) -> tuple[list[str], list[str]]:
    """The records of `changes` with a diff of a replicated text column, and those columns (both sorted); none when
    no diff needs resolving (diffs of fields not replicated are never written)."""
    has_diff = pc.fill_null(pc.greater(pc.list_value_length(changes["diff_fields"]), 0), False)
    if not pc.any(has_diff).as_py():
        return [], []
    text_columns = {c for c, t in schema.columns if isinstance(spark_type(t), T.StringType)}
    with_diff = changes.filter(has_diff)
    wanted = sorted({f for fs in with_diff["diff_fields"].to_pylist() for f in fs if f in text_columns})
    if not wanted:
        return [], []
    return sorted(pc.unique(with_diff["record_id"]).to_pylist()), wanted


def resolved_rows(
    concerned: DataFrame, current: DataFrame, schema: ObjectSchema, ids: list[str], wanted: list[str], *, rows: int
) -> tuple[pa.Table, dict[str, int]]:
    """The change rows `concerned` (every change of the records `ids`, with all their columns) with their diffs of
    the `wanted` columns resolved (or their change made a gap), as Arrow, and the counts. One Spark query gives the
    rows, whether the fold applies each (over `current`) and the stored values; `rows`: its input rows, about."""
    mine = current.where(F.col("Id").isin(ids))
    stored = mine.select(F.col("Id").alias(_STORED_ID), F.struct(*wanted).alias(_STORED))
    query = with_applied(concerned, mine, schema).join(stored, F.col("record_id") == F.col(_STORED_ID), "left")
    fetched = to_arrow(query, rows=rows)
    counts = dict.fromkeys(DIFF_COUNTS, 0)
    text_columns = {c for c, t in schema.columns if isinstance(spark_type(t), T.StringType)}
    records = fetched.to_pylist()
    for record in records:
        record["fields"] = dict(record["fields"] or [])
    by_record: dict[str, list[dict]] = defaultdict(list)  # each record's applied changes, in commit order
    for i in arrow_order(fetched).to_pylist():
        if records[i][APPLIED]:
            by_record[records[i]["record_id"]].append(records[i])
    for record_id, applied in by_record.items():
        done, failed = resolve_record(applied, applied[0][_STORED], text_columns)
        counts["diffs_applied"] += done
        if failed:
            counts["diffs_unresolved"] += 1
            log.warning(
                "%s %s: the diff of %s cannot be applied (%s); the record is marked dirty for reconciliation",
                schema.name,
                printable(record_id),
                failed[0],
                printable(failed[1]),
            )
    for record in records:
        record["fields"] = list(record["fields"].items())
    out = pa.Table.from_pylist(records, schema=fetched.schema)
    return out.drop_columns([APPLIED, _STORED_ID, _STORED]), counts


def resolve_diffs(changes: pa.Table, current: DataFrame, schema: ObjectSchema) -> tuple[pa.Table, dict[str, int]]:
    """`changes` (Arrow) with every diff the fold will apply replaced by its new text (or its change made a gap),
    and the counts `diffs_applied`, `diffs_unresolved`. `current`: the replica rows the fold will fold over."""
    ids, wanted = diff_records(changes, schema)
    if not ids:
        return changes, dict.fromkeys(DIFF_COUNTS, 0)
    concerned = pc.is_in(changes["record_id"], value_set=pa.array(ids, pa.string()))
    subset = changes.filter(concerned)
    frame = from_arrow(current.sparkSession, subset)
    resolved, counts = resolved_rows(frame, current, schema, ids, wanted, rows=subset.num_rows + len(ids))
    return pa.concat_tables([changes.filter(pc.invert(concerned)), resolved.cast(subset.schema)]), counts


def resolve_frame_diffs(
    changes: pa.Table, frame: DataFrame, current: DataFrame, schema: ObjectSchema
) -> tuple[DataFrame, dict[str, int]]:
    """`frame`, the change rows `changes` as Spark has them (`RESOLVE_INPUT`), with every diff the fold will apply
    resolved (as `resolve_diffs`); `changes` only says, on the driver, which records carry one. Only the rows of
    those records come back to the driver and go to Spark again; the rest of `frame` is used as it is."""
    ids, wanted = diff_records(changes, schema)
    if not ids:
        return frame, dict.fromkeys(DIFF_COUNTS, 0)
    rows = int(pc.sum(pc.is_in(changes["record_id"], value_set=pa.array(ids, pa.string()))).as_py() or 0)
    concerned = F.col("record_id").isin(ids)
    resolved, counts = resolved_rows(frame.where(concerned), current, schema, ids, wanted, rows=rows + len(ids))
    again = from_arrow(frame.sparkSession, resolved.select(frame.columns))
    return frame.where(~concerned).unionByName(again), counts
