"""Staged files: Parquet a writer puts beside the warehouse before a Delta commit that names them.

Delta has no commit spanning two tables. A writer that must land rows in a second table as a consequence of a
commit to the first (a replica's history versions, replication/history/) stages them here first, names the staged
file in the first table's commit, and lands them in the second table afterwards: a crash in between leaves a file
the first table's log points at, so a re-run lands exactly it. A file no commit names (the run died before
committing) is never read, and is removed with the others once the second table is past it.

Layout: `<warehouse>/_staged/<table>/<replica version, 20 digits>-<unique>.parquet`, so the files a table no longer
needs are those whose version is below its checkpoint. Local paths and object-store URIs (pyarrow's filesystems).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

STAGED = "_staged"


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    root = root.removeprefix("file://").rstrip("/")
    return pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)


def staged_dir(warehouse_root: str, table: str) -> tuple[pafs.FileSystem, str]:
    filesystem, base = _filesystem(warehouse_root)
    return filesystem, f"{base}/{STAGED}/{table}"


def write_staged(warehouse_root: str, table: str, rows: pa.Table, *, version: int) -> str:
    """Write `rows` as a new staged file for `table`, for the commit that will be `version`; its name."""
    filesystem, folder = staged_dir(warehouse_root, table)
    filesystem.create_dir(folder, recursive=True)
    name = f"{version:020d}-{uuid.uuid4().hex}.parquet"
    tmp = f"{folder}/_{name}"
    pq.write_table(rows, tmp, filesystem=filesystem)
    filesystem.move(tmp, f"{folder}/{name}")  # visible whole or not at all
    return name


def read_staged(warehouse_root: str, table: str, name: str) -> pa.Table:
    filesystem, folder = staged_dir(warehouse_root, table)
    return pq.read_table(f"{folder}/{name}", filesystem=filesystem)


def drop_staged(warehouse_root: str, table: str, *, below: int) -> int:
    """Remove `table`'s staged files for versions below `below` (landed, or never committed); how many."""
    filesystem, folder = staged_dir(warehouse_root, table)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except FileNotFoundError:
        return 0
    gone = 0
    for info in infos:
        name = info.base_name.lstrip("_")
        if info.type == pafs.FileType.File and name[:20].isdigit() and int(name[:20]) < below:
            filesystem.delete_file(info.path)
            gone += 1
    return gone
