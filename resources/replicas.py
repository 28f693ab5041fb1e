"""Reading a replica as a consumer: its current rows, in Arrow or pandas, through the project's one clean read path.

A replica keeps one row per record ever seen; a deleted record stays as a row with `_sf_deleted = true`
(docs/design/contract.md §8), so "the table as the org has it now" is the rows whose `_sf_deleted` is not true:
`current_rows`. It reads through `resources.delta.read_table` (file_uris() + pyarrow's own filesystems), never
deltalake's `to_pyarrow_table` / `to_pyarrow_dataset`, which abort some processes at interpreter exit (exit 134; see
resources/delta.py).

`to_pandas` keeps nullable integer and boolean columns (`_sf_replay_id`, `_sf_commit_number`, ...) as pandas'
nullable `Int64` / `boolean` instead of letting a null turn the whole column into float64 (pandas' default), which
would round replay ids above 2**53 and print `1.0` for `1`.

README, "Query the replicas", shows these and the other tools (DuckDB, polars, DataFusion, Spark); every example
there is run by tests/test_readme_reads.py in a fresh process, its exit code checked.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from resources.delta import read_table

DELETED = "_sf_deleted"
# Arrow types whose pandas default cannot hold a null (int64 -> float64, bool -> object): their nullable dtypes.
NULLABLE_DTYPES = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}
LIVE = ds.field(DELETED).is_null() | ~ds.field(DELETED)


def current_rows(
    warehouse: str, name: str, *, columns: Sequence[str] | None = None, storage_options: dict[str, str] | None = None
) -> pa.Table:
    """The live rows (`_sf_deleted` not true) of the replica `name` under `warehouse` (a path or URI)."""
    table = DeltaTable(f"{warehouse.rstrip('/')}/{name}", storage_options=storage_options)
    return read_table(table, columns=columns, filter=LIVE)


def to_pandas(rows: pa.Table) -> pd.DataFrame:
    """`rows` as a DataFrame whose integer and boolean columns stay integers and booleans when they hold nulls."""
    return rows.to_pandas(types_mapper=NULLABLE_DTYPES.get)
