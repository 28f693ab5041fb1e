"""Reading a replica as a consumer: its current rows, in Arrow or pandas, through the project's one clean read path.

A replica keeps one row per record ever seen; a deleted record stays as a row with `_sf_deleted = true`
(docs/design/contract.md §8), so "the table as the org has it now" is the rows whose `_sf_deleted` is not true:
`current_rows`. It reads through `resources.delta.read_table` (file_uris() + pyarrow's own filesystems), never
deltalake's `to_pyarrow_table` / `to_pyarrow_dataset`, which abort some processes at interpreter exit (exit 134; see
resources/delta.py).

`to_pandas` keeps nullable integer and boolean columns (`_sf_replay_id`, `_sf_commit_number`, ...) as pandas'
nullable `Int64` / `boolean` instead of letting a null turn the whole column into float64 (pandas' default), which
would round replay ids above 2**53 and print `1.0` for `1`.

`duckdb_delta` is a DuckDB connection that reads Delta tables (`delta_scan`) through DuckDB's Delta extension as
PyPI ships it (`duckdb-extension-delta`, built for one DuckDB release: the two are pinned together), loaded from
that package's file with DuckDB's network installs and autoloading off: it works where extensions.duckdb.org is
unreachable, and never runs an extension fetched at query time.

The site's "Reading the replicas" page shows these and the other tools (DuckDB, polars, DataFusion, Spark); every
example there is run by tests/test_readme_reads.py in a fresh process, its exit code checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from resources.delta import read_table

if TYPE_CHECKING:
    import duckdb

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


def duckdb_delta(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the Delta extension loaded from the `duckdb-extension-delta` package (no network).

    `SELECT * FROM delta_scan('<table path>')` then reads a table. Raises `RuntimeError` naming what to install when
    the package is missing or was built for another DuckDB release than the one installed.
    """
    import duckdb

    try:
        import duckdb_extension_delta
    except ImportError as exc:
        raise RuntimeError(
            f"DuckDB's Delta extension is not installed: pip install 'duckdb-extension-delta=={duckdb.__version__}' "
            "(or the project's test extra, which pins it with its DuckDB)"
        ) from exc
    extensions = Path(duckdb_extension_delta.__file__).parent / "extensions"
    path = extensions / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    if not path.is_file():
        built_for = sorted(p.name.removeprefix("v") for p in extensions.glob("v*"))
        raise RuntimeError(
            f"duckdb-extension-delta holds the Delta extension for DuckDB {', '.join(built_for) or 'no release'}, "
            f"not for the installed DuckDB {duckdb.__version__}: install a matching pair, "
            + (f"pip install 'duckdb=={built_for[-1]}' or " if built_for else "")
            + f"pip install 'duckdb-extension-delta=={duckdb.__version__}' (the project's test extra pins one)"
        )
    connection = duckdb.connect(
        database,
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False},
    )
    connection.execute("SET enable_progress_bar = false")  # a script's output is its result, not a progress bar
    connection.execute("LOAD '" + path.as_posix().replace("'", "''") + "'")
    return connection
