"""A replica's row and dirty counts, derived from the table itself: never a counter kept beside the rows.

A replica soft-deletes (docs/design/contract.md §8), so its rows are the records of the snapshot's files; its dirty
records (docs/design/contract.md §6) are the rows whose `_sf_dirty_since` is set. Both come from the per-file statistics
in the Delta log (`num_records`, and `num_records - null_count._sf_dirty_since`): no data is read. Every writer (apply,
reconcile, resync, poll) changes the rows, and the counts follow without any of them adjusting a number.

A file may lack the statistic: delta-rs writes column statistics for the first 32 columns by default, and the
system columns come after the describe() fields, so a wide object's files have none for `_sf_dirty_since` unless
the table names it in `delta.dataSkippingStatsColumns` (replicas created since do: `ObjectSchema.table_properties`).
Files without it alone are counted from their Parquet data (the one column, or the footers for the row count).
"""

from __future__ import annotations

import posixpath

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from resources.delta import arrow_dataset

DIRTY_COLUMN = "_sf_dirty_since"


def _counted(table: DeltaTable, unknown: list[str], filter: pc.Expression | None) -> int:
    """Rows (matching `filter`) of the snapshot's files named in `unknown` (add-action paths), read from Parquet."""
    names = {posixpath.basename(p) for p in unknown}
    dataset = arrow_dataset(table)
    return sum(
        fragment.count_rows(filter=filter)
        for fragment in dataset.get_fragments()
        if posixpath.basename(fragment.path) in names
    )


def _per_file(table: DeltaTable | None, stat: str | None, filter: pc.Expression | None) -> int:
    """Sum over the snapshot's files of `num_records` minus the statistic `stat` (None: nothing subtracted);
    files without the statistics needed are counted from their data with `filter`."""
    if table is None:
        return 0
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return 0
    records = actions["num_records"]
    less = actions[stat] if stat in actions.column_names else pa.nulls(actions.num_rows, pa.int64())
    known = pc.and_(pc.is_valid(records), pc.is_valid(less) if stat else pa.repeat(True, actions.num_rows))
    counts = pc.subtract(records, pc.fill_null(less, 0)) if stat else records
    total = int(pc.sum(pc.filter(counts, known)).as_py() or 0)
    if unknown := pc.filter(actions["path"], pc.invert(known)).to_pylist():
        total += _counted(table, unknown, filter)
    return total


def row_count(table: DeltaTable | None) -> int:
    """Rows in the replica (deleted records included: they are soft-deleted rows)."""
    return _per_file(table, None, None)


def dirty_count(table: DeltaTable | None) -> int:
    """Records awaiting reconciliation: rows whose `_sf_dirty_since` is set."""
    return _per_file(table, f"null_count.{DIRTY_COLUMN}", ds.field(DIRTY_COLUMN).is_valid())
