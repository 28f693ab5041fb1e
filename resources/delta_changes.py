"""A Delta table's rows and Change Data Feed rows, streamed from its Parquet files in bounded batches.

For readers that must hold a batch, not a table, whatever the table's size (the changefeed:
replication/changefeed/). `pyarrow.parquet.ParquetFile.iter_batches` over a *buffered* stream (`buffer_size`, no
pre-buffering) reads each column chunk page by page and decodes `batch_rows` rows at a time: its peak is a batch
plus about a page and a dictionary per column. Measured on a 320,000-row file of one row group (36 columns,
batches of 10,000), the Arrow pool peaked at 110 MB, as for a 50,000-row file (106 MB); a `pyarrow.dataset`
fragment scan of the same file peaked at 398 MB, and an unbuffered `iter_batches` at 160 MB (it reads each column
chunk whole). delta-rs writes row groups of up to 1,048,576 rows. So the files are read here one after another,
one batch at a time, with no read-ahead and no threads, and the Change Data Feed is read the same way rather than
through delta-rs' `load_cdf` (bench/RESULTS.md, "Changefeed memory").

**Change rows** follow the Delta protocol's Change Data Feed, version by version from the commit files in
`_delta_log`: a commit with `cdc` actions contributes its change files (each row carries its `_change_type`:
insert, delete, update_preimage, update_postimage); a commit without them contributes its `add` files as inserts
and its `remove` files as deletes (only those with `dataChange`: OPTIMIZE's rewrites change nothing). Each row gets
`_commit_version` and `_commit_timestamp` (the commit's time). Columns are those of delta-rs' `load_cdf`: the
table's current schema, data columns first and partition columns after them (a file written before a column was
added reads it as null; a column the table no longer has is left out), then the three CDF columns. The removed
files must still exist, as for any CDF reader: vacuum less often than the changes are read.

Like `arrow_dataset` (resources/delta.py), this applies neither deletion vectors nor column mapping, and refuses
tables that use them; partition values are cast from their string form in the log. (Paths in the log are
URL-encoded and decoded here; delta-rs 1.6's `load_cdf` encodes them a second time and cannot find a file whose
partition value holds a space: tests/resources/test_delta_changes.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from resources.delta import safe_cast, table_files

READ_BUFFER = 1 << 16  # bytes read at a time from a column chunk (a buffered stream: one page decoded at a time)
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
INSERT, DELETE = "insert", "delete"


@dataclass(frozen=True)
class ChangeFile:
    """One Parquet file of a version's change rows: a `cdc` file (`change_type` None: its rows carry their own),
    or an `add` (insert) or `remove` (delete) file of a commit without `cdc` files."""

    version: int
    commit_ms: int
    path: str  # as the log has it (relative to the table root, URL-encoded) or an absolute URI
    partition: dict[str, str | None]
    change_type: str | None


def _location(root: str, path: str) -> str:
    """A log path as a path in the table's filesystem (`table_files`)."""
    if "://" in path:
        return pafs.FileSystem.from_uri(path)[1]
    return f"{root}/{unquote(path)}"


def change_files(table: DeltaTable, first: int, last: int) -> list[ChangeFile]:
    """The change files of versions first..last, in version order (module docstring)."""
    filesystem, root = table_files(table)
    files = []
    for version in range(first, last + 1):
        with filesystem.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as f:
            actions = [
                json.loads(line) for line in f.read().decode().split("\n") if line.strip()
            ]  # not splitlines: U+2028 in a value
        commit_ms = next((int(a["commitInfo"].get("timestamp") or 0) for a in actions if "commitInfo" in a), 0)

        files += _change_files(version, commit_ms, actions)
    return files


def _change_files(version: int, commit_ms: int, actions: list[dict]) -> list[ChangeFile]:
    """One commit's changed files: its `cdc` files when it wrote any, else its data adds and removes."""

    def of(kind: str, change_type: str | None) -> list[ChangeFile]:
        return [
            ChangeFile(version, commit_ms, a[kind]["path"], a[kind].get("partitionValues") or {}, change_type)
            for a in actions
            if kind in a and (kind == "cdc" or a[kind].get("dataChange", True))
        ]

    return of("cdc", None) or [*of("add", INSERT), *of("remove", DELETE)]


def change_schema(table: DeltaTable) -> pa.Schema:
    """The columns of the change rows (module docstring)."""
    schema = pa.schema(table.schema().to_arrow())
    partitions = table.metadata().partition_columns
    fields = [f for f in schema if f.name not in partitions] + [schema.field(c) for c in partitions]
    return pa.schema(
        [
            *fields,
            pa.field(CHANGE_TYPE, pa.string()),
            pa.field(COMMIT_VERSION, pa.int64()),
            pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms")),
        ]
    )


def change_rows(table: DeltaTable, files: list[ChangeFile]) -> int:
    """How many change rows the files hold, from their Parquet footers alone."""
    filesystem, root = table_files(table)
    rows = 0
    for file in files:
        with filesystem.open_input_file(_location(root, file.path)) as f:
            rows += pq.ParquetFile(f).metadata.num_rows
    return rows


def change_batches(table: DeltaTable, files: list[ChangeFile], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The files' change rows (`change_schema`), at most `batch_rows` at a time, file after file."""
    filesystem, root = table_files(table)
    schema = change_schema(table)
    for file in files:
        constants: dict[str, int | str] = {COMMIT_VERSION: file.version, COMMIT_TIMESTAMP: file.commit_ms}
        if file.change_type is not None:
            constants[CHANGE_TYPE] = file.change_type
        yield from _file_batches(
            filesystem, _location(root, file.path), schema, {**file.partition, **constants}, batch_rows
        )


def snapshot_batches(table: DeltaTable, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The snapshot's rows (the table's schema), at most `batch_rows` at a time, file after file."""
    filesystem, root = table_files(table)
    schema = pa.schema(table.schema().to_arrow())
    actions = pa.table(table.get_add_actions(flatten=True))
    partitions = [c for c in actions.column_names if c.startswith("partition.")]
    for action in actions.select(["path", *partitions]).to_pylist():
        values = {c.removeprefix("partition."): action[c] for c in partitions}
        yield from _file_batches(filesystem, _location(root, action["path"]), schema, values, batch_rows)


def _file_batches(
    filesystem: pafs.FileSystem, path: str, schema: pa.Schema, constants: dict, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """One Parquet file's rows as `schema`, batch by batch: columns the file has (cast to the schema's types),
    `constants` (partition values, CDF columns) for the columns it has not, nulls for the others."""
    with filesystem.open_input_file(path) as f:
        parquet = pq.ParquetFile(f, buffer_size=READ_BUFFER, pre_buffer=False)
        present = set(parquet.schema_arrow.names)
        wanted = [n for n in schema.names if n in present and n not in constants]
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=wanted, use_threads=False):
            yield pa.RecordBatch.from_arrays([_column(batch, f, constants) for f in schema], schema=schema)


def _column(batch: pa.RecordBatch, field: pa.Field, constants: dict) -> pa.Array:
    if field.name in batch.schema.names:
        # A file written before its column was retyped reads in the new type, null where a value cannot.
        return safe_cast(batch.column(field.name), field.type)
    if field.name in constants and constants[field.name] is not None:
        value = constants[field.name]
        scalar = pa.array([value], pa.string() if isinstance(value, str) else None).cast(field.type)[0]
        return pa.repeat(scalar, batch.num_rows)
    return pa.nulls(batch.num_rows, field.type)
