"""Ordered change rows + current rows -> the state of each record after each transaction (history, SCD type 2).

`spark_ops/fold.py` folds a record's changes of one run into one net row. A history table needs more: the state the
record had after *each* Salesforce transaction (the unit of change), one version per record per transaction. This
is the same fold, run as a scan instead of an aggregate: every step of the fold up to `counted` is reused as it is
(guard, superseded, late, gaps, dirty, resets: one set of rules, so a version and the replica row never disagree),
then each column is the last value set *at or before* each change (a window in commit order per record, restarted
at every CREATE / UNDELETE / SNAPSHOT, which reset the row), and the change that ends a record's part of a
transaction carries the version.

A transaction makes a version of a record only when the replica applied *all* of that record's changes in it
cleanly. It makes none when any of them was a gap, late, skipped while dirty, or applied-and-dirty (the first
UPDATE of a record never seen: it knows only the given fields; a person account's name parts: the org's formatted
Name is unknown): the state after it is not known, and a version must never invent one. The reconcile that fetches
the record then makes the version (replication/history/). Superseded changes make none (the row already holds them).

Output columns: the replica's columns (system columns as the fold sets them, `_sf_synced_at` left to the caller
as there; `_sf_dirty_since` null), plus
`_transaction_key` and `_change_type` (the transaction's last CREATE / UPDATE / DELETE / UNDELETE / SNAPSHOT of
the record, UPDATE if none). Validity (`_valid_from`, `_valid_to`, `_is_current`, `_version`) is assigned when the
versions are chained onto the history table (replication/history/chain.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from object_schema.describe import ObjectSchema, spark_type
from spark_ops.fold import (
    LIFECYCLE,
    RESETS,
    guard_steps,
    kept_position_sql,
    lifecycle_sql,
    system_columns_sql,
)
from spark_ops.sql import in_list, literal, quote, run_sql

TRANSACTION_KEY = "_transaction_key"
CHANGE_TYPE = "_change_type"

_RUNNING = """,
clean AS (
  SELECT *, applied AND NOT coalesce(_names, false)
                 AND NOT coalesce(_unknown_partial AND _pos = _first_pos, false) AS _clean,
         sum(CASE WHEN applied AND change_type IN {resets} THEN 1 ELSE 0 END) OVER run AS _seg
  FROM counted WINDOW run AS (PARTITION BY record_id ORDER BY _pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
running AS (
  SELECT *,
         last(CASE WHEN applied AND change_type IN {lifecycle} THEN {life} END, true) OVER run AS _life_run,
         {values}
  FROM clean
  WINDOW run AS (PARTITION BY record_id ORDER BY _pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
         seg AS (PARTITION BY record_id, _seg ORDER BY _pos ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
txn AS (
  SELECT *, bool_and(NOT coalesce(_live, true) OR coalesce(_clean, false)) OVER t AS _whole,
         max(CASE WHEN applied THEN _pos END) OVER t AS _txn_last,
         max_by(change_type, CASE WHEN applied AND change_type IN {lifecycle} THEN _pos END) OVER t AS _txn_life
  FROM running WINDOW t AS (PARTITION BY record_id, transaction_key)
)
"""


def _value_name(column: str) -> str:
    return quote(f"_v_{column}")


def versions_sql(schema: ObjectSchema, current_columns: list[str]) -> str:
    """The query behind `transaction_versions` over `{changes}` and `{current}`: the fold's guard steps
    (spark_ops/fold.py `guard_steps`), then `clean`, `running` and `txn` above; a version's system columns are the
    fold's (`system_columns_sql`), with the version's own change as the last applied and no dirty mark."""
    data = [(c, t) for c, t in schema.columns if c != "Id"]
    running = (
        ",\n         ".join(
            f"last(CASE WHEN applied AND array_contains(set_fields, {literal(c)}) THEN named_struct('v', "
            f"element_at(fields, {literal(c)})) END, true) OVER seg AS {_value_name(c)}"
            for c, _ in data
        )
        or "NULL AS _none"
    )
    steps = _RUNNING.format(resets=in_list(RESETS), lifecycle=in_list(LIFECYCLE), life=lifecycle_sql(), values=running)
    values = "".join(
        f"CASE WHEN v.{_value_name(c)} IS NOT NULL THEN CAST(nullif(v.{_value_name(c)}.v, '') AS "
        f"{spark_type(t).simpleString()}) WHEN v._seg > 0 THEN NULL ELSE cur.{quote(c)} END AS {quote(c)},\n  "
        for c, t in data
    )
    system = system_columns_sql(
        record="v.record_id",
        life="v._life_run",
        last=kept_position_sql("v"),
        dirty="CAST(NULL AS timestamp)",
        bucket_chars=schema.bucket_chars,
    )
    return (
        f"{guard_steps(schema, current_columns)}{steps}SELECT v.record_id AS Id,\n  {values}{system},\n"
        f"  v.transaction_key AS {TRANSACTION_KEY},\n  coalesce(v._txn_life, 'UPDATE') AS {CHANGE_TYPE}\n"
        f"FROM txn v LEFT JOIN cur ON v.record_id = cur.Id\n"
        f"WHERE v.applied AND v._pos = v._txn_last AND v._whole"
    )


def transaction_versions(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """One row per (record, transaction) whose changes the fold applies cleanly over `current`: the record's full
    replica row after that transaction, plus `_transaction_key` and `_change_type` (module docstring).

    `changes` and `current`: exactly what `fold_changes` is given (closed transactions, no overflow rows; the
    current replica rows of the touched records)."""
    return run_sql(changes.sparkSession, versions_sql(schema, current.columns), changes=changes, current=current)
