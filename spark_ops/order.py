"""Commit order, declared once (docs/design/contract.md §4), and the forms the code compares it in.

Changes are ordered by `(commit_ts, commit_number, sequence_number)`, then `replay_id` to break ties within a batch;
never by file, channel or arrival. `COMMIT_ORDER` lists those columns of a canonical change row, most significant
first, with the replica column that keeps each for the last change applied to a row (§8: `_sf_commit_ts`,
`_sf_commit_number`, `_sf_sequence_number`; a row keeps its replay id, but the guard never compares it, §5).

Spark and pyarrow each need their own form of the order, and both are derived here from that one list, so they
cannot drift (tests/spark_ops/test_order.py sorts the same rows both ways):

- `position_sql`: a change row's position as a Spark SQL struct, compared with `<`, `min`, `max_by` (the fold and
  the history versions, spark_ops/fold.py and spark_ops/history.py);
- `at_or_before_row_sql`: the guard's comparison of a change with the position its record's row keeps (§5);
- `arrow_order`: row indices of an Arrow table in commit order, of change rows (the newest event,
  replication/closure.py; text diffs, replication/diffs.py) or of replica rows by the columns they keep (history
  versions, replication/history/chain.py).

**Nulls sort first**, before every value, in every form: Spark compares a struct whose field is null as the smaller
one, and the Arrow form places nulls first (last when descending). A null replay id reads as 0 in both
(`null_as`): replay ids are only the last tie-break (§4: they are not positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class OrderKey:
    """One column of commit order: its name in a change row, the replica column keeping it (None: the guard does
    not compare it), and the value a null reads as (None: a null stays null and sorts first)."""

    column: str
    row_column: str | None
    null_as: int | None = None


COMMIT_ORDER: tuple[OrderKey, ...] = (
    OrderKey("commit_ts", "_sf_commit_ts"),
    OrderKey("commit_number", "_sf_commit_number"),
    OrderKey("sequence_number", "_sf_sequence_number"),
    OrderKey("replay_id", None, null_as=0),
)
# The columns of a replica row that hold its position: what the guard compares a change with (§5).
ROW_POSITION: tuple[OrderKey, ...] = tuple(k for k in COMMIT_ORDER if k.row_column is not None)


def _sql_value(alias: str, key: OrderKey) -> str:
    value = f"{alias}.{key.column}" if alias else key.column
    return value if key.null_as is None else f"coalesce({value}, {key.null_as})"


def position_sql(alias: str = "") -> str:
    """SQL: the commit-order position of the change row `alias` (a table alias, or none) as a struct whose fields
    compare in order, `commit_ts`, `commit_number`, `sequence_number`, `replay_id`."""
    fields = ", ".join(f"'{k.column}', {_sql_value(alias, k)}" for k in COMMIT_ORDER)
    return f"named_struct({fields})"


def at_or_before_row_sql(change: str, row: str) -> str:
    """SQL: the change row `change` is at or before the position its record's replica row `row` keeps (the guard,
    §5), false when the row has none. A row without a commit number (a snapshot, reconcile or polled row) has only
    its commit time (the record's SystemModstamp): everything committed at or before it is in it."""
    first, rest = ROW_POSITION[0], ROW_POSITION[1:]
    ts, row_ts = f"{change}.{first.column}", f"{row}.{first.row_column}"
    mine = ", ".join(f"'{k.column}', {change}.{k.column}" for k in rest)
    kept = ", ".join(f"'{k.column}', {row}.{k.row_column}" for k in rest)
    return (
        f"coalesce({row_ts} IS NOT NULL AND ({ts} < {row_ts} OR ({ts} = {row_ts} AND ("
        f"{row}.{rest[0].row_column} IS NULL OR named_struct({mine}) <= named_struct({kept})))), false)"
    )


def arrow_order(
    rows: pa.Table, *, group_by: Sequence[str] = (), kept: bool = False, descending: bool = False
) -> pa.Array:
    """Indices of `rows` in commit order (a stable sort), within groups of the `group_by` columns (sorted
    ascending, before it). `kept`: `rows` are replica rows, ordered by the position columns they keep
    (`ROW_POSITION`); else change rows (`COMMIT_ORDER`). `descending`: newest first."""
    keys = ROW_POSITION if kept else COMMIT_ORDER
    columns = {f"g{i}": rows[c] for i, c in enumerate(group_by)}
    for i, k in enumerate(keys):
        values = rows[k.row_column if kept else k.column]
        columns[f"k{i}"] = values if k.null_as is None else pc.fill_null(values, k.null_as)
    # Nulls first in commit order: at the start ascending, at the end descending.
    order = ("descending", "at_end") if descending else ("ascending", "at_start")
    sort_keys = [(name, "ascending", "at_end") if name.startswith("g") else (name, *order) for name in columns]
    return pc.sort_indices(pa.table(columns), sort_keys=sort_keys)


def arrow_positions(rows: pa.Table) -> list[list]:
    """The position of each change row of `rows` as a list of plain values in commit order (a timestamp as its
    integer value, a null as `null_as`): what commit state records and compares (replication/closure.py)."""
    columns = []
    for k in COMMIT_ORDER:
        values = rows[k.column] if k.null_as is None else pc.fill_null(rows[k.column], k.null_as)
        columns.append(pc.cast(values, pa.int64()) if pa.types.is_timestamp(values.type) else values)
    return [list(p) for p in zip(*(c.to_pylist() for c in columns))]
