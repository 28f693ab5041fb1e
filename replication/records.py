"""Org records (Bulk API 2.0 CSV pages, REST JSON) -> typed replica rows, as Arrow.

Both sources give text (CSV) or JSON scalars; the replica column types come from the object's describe()
(docs/design/contract.md §8). An empty value is null: Salesforce does not store empty strings. Conversion is columnar
(pyarrow compute), page by page, so a resync never holds more than one page of the object in memory.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from object_schema.hashing import hash_arrow, hash_salt
from resources.salesforce import rest_text_batch

# `_sf_source`, where a row's values came from (spark_ops/validation.py lists them; change events write "cdc"): a
# Bulk snapshot, a reconcile's fetch, a poll. Row origins, not run actions (those are cdc_assets/actions.py).
SNAPSHOT, RECONCILE, POLL = "snapshot", "reconcile", "poll"
SYNCED_AT = "_sf_synced_at"


class ValueDoesNotFit(ValueError):
    """An org value its replica column's type cannot hold: the field's type changed in the org (or the field was
    deleted and created again with another type) since the replica learned it. Never a run failure: the replica
    asks describe() again and follows the field (replication/retype.py), then reads again."""

    def __init__(self, object_name: str, column: str, column_type: pa.DataType, detail: str):
        self.object_name, self.column, self.column_type = object_name, column, column_type
        super().__init__(
            f"{object_name}.{column}: the org gave a value the column ({column_type}) cannot hold ({detail}); "
            "its type changed in the org"
        )


def cast_text(column: pa.Array, target: pa.DataType) -> pa.Array:
    """Org text (CSV, REST JSON as text) -> the replica type `target`; an empty value is null."""
    column = pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)
    if pa.types.is_string(target):
        return column
    if pa.types.is_timestamp(target):
        # REST writes +0000, CSV and events write Z.
        column = pc.replace_substring_regex(column, r"\+0000$", "Z")
    if pa.types.is_boolean(target):
        return pc.equal(pc.utf8_lower(column), "true")
    return pc.cast(column, target)


def _typed(column: pa.Array, target: pa.DataType, object_name: str, name: str) -> pa.Array:
    try:
        return cast_text(column, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        # The Arrow message quotes the value: org data, which stays out of logs.
        raise ValueDoesNotFit(object_name, name, target, type(exc).__name__) from exc


def replica_rows(text: pa.Table, schema: ObjectSchema, *, source: str, synced_at: datetime) -> pa.Table:
    """Text columns named like the org's fields (incl. IsDeleted, SystemModstamp) -> replica rows.

    `_sf_commit_ts` is the record's SystemModstamp (docs/design/contract.md §6-7): events at or before it are already
    included. An object without SystemModstamp is positioned by its `schema.position_field` (LastModifiedDate,
    CreatedDate).
    """
    target = schema.arrow_schema()
    n = text.num_rows
    have = set(text.column_names)
    cols = {}
    for c, _ in schema.columns:
        field = target.field(c)
        cols[c] = _typed(text[c].combine_chunks(), field.type, schema.name, c) if c in have else pa.nulls(n, field.type)
    if schema.hashed:  # replication.yaml `hash:` (object_schema/hashing.py): never stored in clear
        salt = hash_salt()
        cols |= {c: hash_arrow(cols[c], salt) for c in schema.hashed}
    if schema.position_field is None:
        raise ValueError(
            f"{schema.name} has no SystemModstamp, LastModifiedDate or CreatedDate (describe()): its "
            f"records have no position to replicate them by; leave it out of replication.yaml"
        )
    modstamp = cast_text(text[schema.position_field].combine_chunks(), pa.timestamp("us", tz="UTC"))
    deleted = (
        cast_text(text["IsDeleted"].combine_chunks(), pa.bool_()) if "IsDeleted" in have else pa.array([False] * n)
    )
    deleted = pc.fill_null(deleted, False)
    cols |= {
        "_sf_deleted": deleted,
        "_sf_deleted_at": pc.if_else(deleted, modstamp, pa.scalar(None, modstamp.type)),
        "_sf_commit_ts": modstamp,
        "_sf_replay_id": pa.nulls(n, pa.int64()),
        "_sf_commit_number": pa.nulls(n, pa.int64()),
        "_sf_sequence_number": pa.nulls(n, pa.int64()),
        "_sf_dirty_since": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "_sf_source": pa.array([source] * n, pa.string()),
        SYNCED_AT: pa.array([synced_at] * n, pa.timestamp("us", tz="UTC")),
        BUCKET_COLUMN: pc.utf8_slice_codeunits(cols["Id"], 0, schema.bucket_chars),
    }
    return pa.table(cols).cast(target)


def stamped(rows: pa.Table, synced_at: datetime) -> pa.Table:
    """`rows` with `_sf_synced_at` (when the run wrote them) set to `synced_at`, appended if they have none.

    Rows folded in Spark get their time here rather than from `current_timestamp()` in the query: Spark compiles
    that time into the query's generated code as a constant, so every run's fold would be new code to generate,
    compile and JIT, even a plan the JVM has run before (bench/RESULTS.md)."""
    values = pa.repeat(pa.scalar(synced_at, pa.timestamp("us", tz="UTC")), rows.num_rows)
    i = rows.schema.get_field_index(SYNCED_AT)
    return rows.set_column(i, SYNCED_AT, values) if i >= 0 else rows.append_column(SYNCED_AT, values)


def records_to_text(records: list[dict], fields: list[str]) -> pa.Table:
    """REST JSON records -> a text table with one column per field."""
    return pa.Table.from_batches([rest_text_batch(records, fields)])


def mark_deleted(rows: pa.Table, *, at: datetime, source: str, synced_at: datetime) -> pa.Table:
    """Existing replica rows of records the org no longer returns: soft-deleted, values kept
    (docs/design/contract.md §7).

    Their position moves to `at` (when the org was asked): any event before it is already reflected.
    """
    n = rows.num_rows
    ts = pa.timestamp("us", tz="UTC")
    was_deleted = pc.fill_null(rows["_sf_deleted"], False)
    updates = {
        "_sf_deleted": pa.array([True] * n),
        "_sf_deleted_at": pc.if_else(was_deleted, rows["_sf_deleted_at"], pa.scalar(at, ts)),
        "_sf_commit_ts": pa.array([at] * n, ts),
        "_sf_replay_id": pa.nulls(n, pa.int64()),
        "_sf_commit_number": pa.nulls(n, pa.int64()),
        "_sf_sequence_number": pa.nulls(n, pa.int64()),
        "_sf_dirty_since": pa.nulls(n, ts),
        "_sf_source": pa.array([source] * n, pa.string()),
        SYNCED_AT: pa.array([synced_at] * n, ts),
    }
    for name, values in updates.items():
        rows = rows.set_column(rows.schema.get_field_index(name), name, values)
    return rows
