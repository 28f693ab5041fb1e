"""A range of replica versions' Change Data Feed in parts of at most about `batch_rows` rows, every row of a key in
one part, so that each part nets on its own (rows.net_changes) and an export holds one part, however large the
table. Used by cdc_assets/changefeed/export.py.

The change rows are counted from their files' Parquet footers (resources/delta_changes.py). A range that fits is
one part, read whole. A larger one (a resync's overwrite holds the table twice: every old row deleted, every new
one inserted) is read once, batch by batch, and partitioned by a hash of `Id` into at most `FAN_OUT` spill files
(Arrow IPC streams, LZ4-compressed, in a temporary folder: at most about `batch_rows` rows are buffered before
they are written out); a spill file that fits is a part, a larger one is partitioned again by the next bits of
the hash (Grace hash partitioning: 64 files of 64 already split 4,096 ways). Memory therefore holds one batch and one part, and the
table's rows are read once rather than once per part. The hash is pandas' `hash_array` (SipHash with a fixed
key), so the parts, and the order of the records an export writes, are the same on every run.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from resources.delta_changes import change_batches, change_files, change_rows, change_schema

KEY = "Id"
FAN_OUT = 64  # spill files a partitioning pass writes at most (each an open file)
LEVEL_BITS = 16  # hash bits each level of partitioning uses (64 bits: 4 levels)
SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")  # 43 % of the uncompressed size (bench table)


def cdf_parts(table: DeltaTable, first: int, last: int, batch_rows: int) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """The CDF schema of versions first..last and their CDF rows in parts of about `batch_rows` rows at most,
    every key's rows in one part (module docstring)."""
    files = change_files(table, first, last)
    schema = change_schema(table)
    rows = change_rows(table, files)
    return schema, _parts(change_batches(table, files, batch_rows), schema, rows, batch_rows, level=0)


def key_hash(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each key, the same in every process (SipHash, pandas' fixed key)."""
    return pd.util.hash_array(np.asarray(ids.to_pylist(), dtype=object), categorize=False)


def _parts(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, rows: int, batch_rows: int, *, level: int
) -> Iterator[pa.Table]:
    if rows <= batch_rows or level * LEVEL_BITS >= 64:
        yield pa.Table.from_batches(list(batches), schema)
        return
    fan = min(FAN_OUT, math.ceil(rows / batch_rows))
    with tempfile.TemporaryDirectory(prefix="changefeed-parts-") as folder:
        counts = _spill(batches, schema, Path(folder), fan, batch_rows, level)
        for bucket, count in enumerate(counts):
            if not count:
                continue
            path = Path(folder) / f"{bucket}.arrows"
            with pa.OSFile(str(path)) as f:
                reader = pa.ipc.open_stream(f)
                # every row in one bucket: no bit of this level splits them, the next level's may
                yield from _parts(reader, schema, count, batch_rows, level=level + 1)
            path.unlink()


def _spill(
    batches: Iterable[pa.RecordBatch], schema: pa.Schema, folder: Path, fan: int, batch_rows: int, level: int
) -> list[int]:
    """Write the rows to `fan` IPC stream files `<bucket>.arrows` by their key's hash bits of this level; returns
    the rows each got."""
    counts = [0] * fan
    writers: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
    pending: list[pa.RecordBatch] = []

    def flush() -> None:
        rows = pa.Table.from_batches(pending, schema).combine_chunks()
        pending.clear()
        buckets = pa.array((key_hash(rows[KEY]) >> np.uint64(level * LEVEL_BITS)) % np.uint64(fan))
        order = pc.sort_indices(buckets)
        rows, buckets = rows.take(order), buckets.take(order)
        start = 0
        for entry in pc.value_counts(buckets).to_pylist():  # in sorted order: buckets are sorted
            bucket, n = int(entry["values"]), entry["counts"]
            if bucket not in writers:
                sink = pa.OSFile(str(folder / f"{bucket}.arrows"), "wb")
                writers[bucket] = sink, pa.ipc.new_stream(sink, schema, options=SPILL_OPTIONS)
            writers[bucket][1].write_table(rows.slice(start, n))
            counts[bucket] += n
            start += n

    try:
        held = 0
        for batch in batches:
            pending.append(batch)
            held += batch.num_rows
            if held >= batch_rows:
                flush()
                held = 0
        if pending:
            flush()
    finally:
        for sink, writer in writers.values():
            writer.close()
            sink.close()
    return counts
