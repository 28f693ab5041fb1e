"""Stored change rows meet the replica's describe() at apply time (docs/design/contract.md §4, §8, §9).

change_events parses every line once, with the describe() of the objects replicated *then*. Two things can make
those rows disagree with the replica that applies them later, and both are settled here, before the fold:

- **An object added to replication.yaml later.** Its events were stored raw (compound values nested, nothing
  typed: `typed` is false). `normalized` derives from them exactly the rows parsing with its describe() would have
  made (`spark_ops.parse.normalize_changes`); a value that does not fit its type quarantines its line (with the
  reason, as ingest would have) and the change becomes a gap of its record, which is then reconciled. Nothing is
  nulled silently.
- **A field the describe() does not know** (a custom field added in the org after the table was made).
  `unknown_fields` finds the names events set that are neither columns, compound parts nor ignored (formula)
  fields; the asset then refreshes describe() from the org (or the file) and the fold writes the new column
  (Delta schema evolution: a column is added, nothing rewritten). Records whose *already applied* events carried a
  field before its column existed get a gap row (`backfill_gaps`), so the reconcile fetches their value. Fields
  still unknown after the refresh are counted and logged, never dropped without a word.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from object_schema.describe import ObjectSchema
from replication.quarantine import record_quarantine
from replication.run import ApplyRun
from replication.state import Q_APPLY_STATE
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import QUARANTINE_SCHEMA
from resources.printable import printable_list
from resources.spark import from_arrow, to_arrow
from spark_ops.fold import gap_type
from spark_ops.parse import normalize_changes

log = logging.getLogger(__name__)


def _untyped(rows: pa.Table) -> pa.Array:
    return pc.invert(pc.fill_null(rows["typed"], False))


def normalized(
    spark: SparkSession, rows: pa.Table, schema: ObjectSchema, *, also: set[str] | frozenset[str] = frozenset()
) -> tuple[pa.Table, pa.Table, int]:
    """`rows` (stored change rows of `schema`'s object) with every untyped row, and every row setting a field in
    `also` (columns whose values nobody has checked yet), derived again with `schema`; and the quarantine entries
    (`source_file, source_line, raw, reason`) of the lines whose values do not fit, one per line; and how many rows
    became gap rows for it."""
    needs = _untyped(rows)
    if also:
        sets_new = pc.is_in(pc.list_flatten(rows["set_fields"]), value_set=pa.array(sorted(also), pa.string()))
        parents = pc.list_parent_indices(rows["set_fields"])
        hit = pc.unique(pc.filter(parents, sets_new))
        needs = pc.or_(needs, pc.is_in(pa.array(range(rows.num_rows), pa.int64()), value_set=hit.cast(pa.int64())))
    if not rows.num_rows or not pc.any(needs).as_py():
        return rows, QUARANTINE_SCHEMA.empty_table(), 0
    redo = rows.filter(needs)
    derived = to_arrow(normalize_changes(from_arrow(spark, redo), schema), rows=redo.num_rows)
    bad = derived.filter(pc.is_valid(derived["value_error"]))
    derived = derived.drop_columns(["value_error"]).cast(rows.schema)
    out = pa.concat_tables([rows.filter(pc.invert(needs)), derived])
    entries: dict[tuple[str, int], tuple[str, str]] = {}  # (source_file, source_line) -> (raw, reason)
    for r in bad.select(
        ["source_file", "source_line", "entity", "transaction_key", "sequence_number", "value_error"]
    ).to_pylist():
        raw = json.dumps({k: r[k] for k in ("entity", "transaction_key", "sequence_number")})
        entries.setdefault(
            (r["source_file"], r["source_line"]),
            (raw, f"{r['value_error']} (checked at apply time with {schema.name}'s describe())"),
        )
    quarantine = pa.table(
        {
            "source_file": [k[0] for k in entries],
            "source_line": [k[1] for k in entries],
            "raw": [v[0] for v in entries.values()],
            "reason": [v[1] for v in entries.values()],
        },
        schema=QUARANTINE_SCHEMA,
    )
    return out, quarantine, bad.num_rows


def unknown_fields(rows: pa.Table, schema: ObjectSchema) -> list[str]:
    """Names the change rows set that `schema` has no place for (not a column, compound part or ignored field)."""
    if not rows.num_rows:
        return []
    names = pc.unique(pc.list_flatten(rows["set_fields"])).to_pylist()
    return sorted(n for n in names if n is not None and not schema.knows(n))


def missing_columns(table, schema: ObjectSchema) -> list[str]:
    """Columns of `schema` the replica table does not have yet (added to describe() since it was written)."""
    if table is None:
        return []
    have = {f.name for f in table.schema().fields}
    return [c for c in schema.column_names if c not in have]


def backfill_gaps(
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    columns: list[str],
    *,
    applied: int,
    now: datetime,
    template: pa.Schema,
) -> pa.Table:
    """One gap row per record whose events applied so far (ingest sequence <= `applied`) set one of `columns`:
    those values were dropped while the columns did not exist, so the records are reconciled. The gap sits at
    `now`, after every change of the run."""
    table = warehouse.table(CHANGE_EVENTS)
    if table is None or not columns or applied <= 0:
        return template.empty_table()
    seen = warehouse.read(
        table,
        partitions=[("entity", "=", schema.name)],
        columns=["record_id", "set_fields"],
        filter=pc.field("_ingest_seq") <= applied,
        prune=[("_ingest_seq", "<=", applied)],
    )
    hits = pc.is_in(pc.list_flatten(seen["set_fields"]), value_set=pa.array(columns, pa.string()))
    rows = pc.unique(pc.filter(pc.list_parent_indices(seen["set_fields"]), hits))
    ids = sorted(set(pc.take(seen["record_id"], rows).to_pylist()))
    if not ids:
        return template.empty_table()
    n = len(ids)
    ts = pa.scalar(now, pa.timestamp("us", tz="UTC"))
    key = f"schema-backfill:{','.join(columns)}"
    values = {
        "entity": pa.repeat(pa.scalar(schema.name), n),
        "record_id": pa.array(ids, pa.string()),
        "change_type": pa.repeat(pa.scalar(gap_type("UPDATE")), n),
        "commit_ts": pa.repeat(ts, n),
        "commit_number": pa.repeat(pa.scalar(0, pa.int64()), n),
        "transaction_key": pa.repeat(pa.scalar(key), n),
        "sequence_number": pa.repeat(pa.scalar(0, pa.int64()), n),
        "event_key": pa.repeat(pa.scalar(key), n),
    }
    values["typed"] = pa.repeat(pa.scalar(True), n)
    nullable = pa.schema([f.with_nullable(True) for f in template])
    cols = [values[f.name].cast(f.type) if f.name in values else pa.nulls(n, f.type) for f in nullable]
    return pa.Table.from_arrays(cols, schema=nullable)


DRIFT_COUNTS = ("values_invalid", "columns_added", "schema_backfill", "unknown_fields")


@dataclass
class Drift:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DRIFT_COUNTS, 0))
    unknown: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)


def meet_describe(
    run: ApplyRun, changes: pa.Table, *, replica: DeltaTable | None, applied: int
) -> tuple[ObjectSchema, pa.Table, Drift]:
    """The schema to apply `changes` with, the changes ready for the fold (plus backfill gap rows), and what
    happened: lines quarantined for values that do not fit, columns added, records to backfill, unknown fields."""
    spark, warehouse, schema, run_id, now, refresh = (
        run.spark,
        run.warehouse,
        run.schema,
        run.run_id,
        run.now,
        run.refresh,
    )
    drift = Drift()
    changes, bad, gapped = normalized(spark, changes, schema, also=set(missing_columns(replica, schema)))
    unknown = unknown_fields(changes, schema)
    if unknown and refresh is not None:
        before = set(schema.column_names)
        log.info(
            "%s: events set fields describe() does not know (%s); asking describe() again",
            schema.name,
            ", ".join(printable_list(unknown)),
        )
        schema = refresh()
        new = {c for c in schema.column_names if c not in before}
        if new:
            changes, more, more_gapped = normalized(spark, changes, schema, also=new)
            bad, gapped = pa.concat_tables([bad, more]), gapped + more_gapped
        unknown = unknown_fields(changes, schema)
    record_quarantine(
        warehouse,
        bad,
        run_id=run_id,
        now=now,
        key=Q_APPLY_STATE,
        schemas={schema.name: schema},
        consequence="line quarantined, its records marked dirty",
    )
    if unknown:
        log.warning(
            "%s: events set fields that describe() does not have, even asked again: %s. Their values are "
            "not replicated; add them to the describe file or grant the integration user access to them",
            schema.name,
            ", ".join(printable_list(unknown)),
        )
    drift.added = missing_columns(replica, schema)
    backfill = backfill_gaps(warehouse, schema, drift.added, applied=applied, now=now, template=changes.schema)
    if backfill.num_rows:
        log.info(
            "%s: %d records carried %s before the column existed; marked dirty for a reconcile",
            schema.name,
            backfill.num_rows,
            ", ".join(drift.added),
        )
    drift.counts = {
        "values_invalid": gapped,
        "columns_added": len(drift.added),
        "schema_backfill": backfill.num_rows,
        "unknown_fields": len(unknown),
    }
    drift.unknown = unknown
    return schema, pa.concat_tables([changes, backfill], promote_options="permissive"), drift
