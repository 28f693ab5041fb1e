"""Text diffs resolved just before the fold, in apply and in reconcile (docs/design/contract.md §3).

A change row whose `diff_fields` names a replicated column still holds `{"diff": ...}` there. Before the fold,
`resolve_diffs` replaces it with the new text: it asks the fold itself which changes it will apply
(`spark_ops.fold.applied_changes`: guard, dirty records, unknown records: the same query, so the two never
disagree), reads the stored values of the fields concerned, and walks each record's applied changes in commit order
(spark_ops/order.py) on the driver (`cdc_assets.unified_diff.resolve_record`). Diff rows are rare, so only the records
that have one take this path, Arrow in and Arrow out; every other row passes through untouched.

A diff that cannot be resolved (no stored value, record not in the replica, hash mismatch, hunks that do not
match) turns its change into `GAP_<type>`: the fold marks the record dirty at that commit, it is counted among
`gaps`, and reconciliation fetches the record. A warning names the record, the field and why.
"""

from __future__ import annotations

from collections import defaultdict

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyspark.sql.functions as F
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from cdc_assets.unified_diff import resolve_record
from object_schema.describe import ObjectSchema, spark_type
from resources.printable import printable
from resources.spark import from_arrow, to_arrow
from spark_ops.fold import applied_changes
from spark_ops.order import arrow_order

log = dg.get_dagster_logger(__name__)  # the warnings belong in the run's event log, where operators look

DIFF_COUNTS = ("diffs_applied", "diffs_unresolved")
_POSITION = ("commit_micros", "commit_number", "sequence_number", "replay_id")


def _key(row: dict) -> tuple:
    return (row["record_id"], row["change_type"], *(row[k] for k in _POSITION))


def resolve_diffs(changes: pa.Table, current: DataFrame, schema: ObjectSchema) -> tuple[pa.Table, dict[str, int]]:
    """`changes` with every diff the fold will apply replaced by its new text (or its change made a gap), and the
    counts `diffs_applied`, `diffs_unresolved`. `current`: the replica rows the fold will fold over."""
    counts = dict.fromkeys(DIFF_COUNTS, 0)
    has_diff = pc.fill_null(pc.greater(pc.list_value_length(changes["diff_fields"]), 0), False)
    if not pc.any(has_diff).as_py():
        return changes, counts
    text_columns = {c for c, t in schema.columns if isinstance(spark_type(t), T.StringType)}
    wanted = sorted({f for fs in changes.filter(has_diff)["diff_fields"].to_pylist() for f in fs if f in text_columns})
    if not wanted:  # diffs of fields not replicated: never written, nothing to resolve
        return changes, counts
    ids = pc.unique(changes.filter(has_diff)["record_id"])
    concerned = pc.is_in(changes["record_id"], value_set=ids)
    subset = changes.filter(concerned)
    subset = subset.append_column(
        "commit_micros", pc.cast(pc.cast(subset["commit_ts"], pa.timestamp("us", tz="UTC")), pa.int64())
    )

    # The concerned rows only, read once: the fold's classification and the stored values both come from them.
    spark = current.sparkSession
    mine = to_arrow(current.where(F.col("Id").isin(ids.to_pylist())), rows=len(ids))
    applied = to_arrow(
        applied_changes(from_arrow(spark, subset), from_arrow(spark, mine), schema).where("applied"),
        rows=subset.num_rows + mine.num_rows,
    )
    applied_keys = {_key(r) for r in applied.to_pylist()}
    stored = {r["Id"]: r for r in mine.select(["Id", *wanted]).to_pylist()}

    rows = subset.to_pylist()
    for row in rows:
        row["fields"] = dict(row["fields"] or [])
    by_record: dict[str, list[dict]] = defaultdict(list)  # each record's applied changes, in commit order
    for i in arrow_order(subset).to_pylist():
        if _key(rows[i]) in applied_keys:
            by_record[rows[i]["record_id"]].append(rows[i])
    for record_id, record_rows in by_record.items():
        done, failed = resolve_record(record_rows, stored.get(record_id), text_columns)
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
    for row in rows:
        row["fields"] = list(row["fields"].items())
    resolved = pa.Table.from_pylist(rows, schema=subset.schema).drop_columns(["commit_micros"])
    return pa.concat_tables([changes.filter(pc.invert(concerned)), resolved]), counts
