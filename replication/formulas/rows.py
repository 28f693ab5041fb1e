"""Formula values read from the org (Bulk API 2.0 CSV text) -> typed formula rows, as Arrow (pure).

A formula row is `Id`, the formula columns typed per describe()'s `type` (docs/design/contract.md §8: double, currency
and percent are doubles, string text, date a date, ...), `_sf_formulas_at` (when the values were read) and the layout
column `_sf_bucket`, so a merge names the partitions it touches. Values are cast as every other org read is
(replication/records.py): an empty cell is null.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from object_schema.describe import BUCKET_COLUMN, FORMULAS_AT, ObjectSchema
from replication.records import cast_text


def formula_schema(schema: ObjectSchema) -> pa.Schema:
    """Id, the formula columns, `_sf_formulas_at`, `_sf_bucket`."""
    return pa.schema(
        [pa.field("Id", pa.string()), *schema.formula_arrow_fields(), pa.field(BUCKET_COLUMN, pa.string())]
    )


def formula_values(text: pa.Table, schema: ObjectSchema, *, read_at: datetime) -> dict[str, pa.Array]:
    """The formula columns and `_sf_formulas_at` of `text` (one text column per formula field), typed."""
    target = {f.name: f.type for f in schema.formula_arrow_fields()}
    values = {c: cast_text(text[c].combine_chunks(), target[c]) for c in schema.formula_names}
    values[FORMULAS_AT] = pa.array([read_at] * text.num_rows, target[FORMULAS_AT])
    return values


def formula_rows(text: pa.Table, schema: ObjectSchema, *, read_at: datetime) -> pa.Table:
    """Formula rows of a page of text (columns `Id` and the formula fields)."""
    ids = text["Id"].combine_chunks()
    columns = {
        "Id": ids,
        **formula_values(text, schema, read_at=read_at),
        BUCKET_COLUMN: pc.utf8_slice_codeunits(ids, 0, schema.bucket_chars),
    }
    return pa.table(columns).cast(formula_schema(schema))


def with_formulas(rows: pa.Table, text: pa.Table, schema: ObjectSchema, *, read_at: datetime) -> pa.Table:
    """Replica rows (`arrow_schema()`) with the formula columns of the same records read with them (a resync reads
    both in one query): `table_arrow_schema()`."""
    if not schema.formulas:
        return rows
    for name, values in formula_values(text, schema, read_at=read_at).items():
        rows = rows.append_column(name, values)
    return rows.cast(schema.table_arrow_schema())
