"""The files (not tables) an erasure rewrites: archived landing files, changefeed files and staged history files,
without what names an erased record (cdc_assets/operate/erase.py says when and why).

A line *names* a record when it holds its Id's 15-character form (an 18-character Id starts with it): in a landing
line that is the header's `recordIds`, a Datastream payload's `Id`, or a reference from another record's field (a
Contact's `AccountId`): any of them goes, since the line cannot be kept without the Id. A changefeed record names it
when its key is the Id (YDB `key: [Id]`, Debezium `key: {Id}`).

Every rewrite is atomic: the new content under a temporary name, renamed over the old (an object store: one
upload). A file left with no line is deleted, except a feed file (the feed's position is its newest file's name).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from resources.changefeed_store import FeedStore
from resources.staged import staged_dir
from resources.storage import Folder, filesystem, is_uri


@dataclass(frozen=True)
class Rewritten:
    files: int = 0  # files rewritten or deleted
    lines: int = 0  # lines left out


def names_any(text: str, keys: Iterable[str]) -> bool:
    return any(k in text for k in keys)


def _files(location: str) -> list[str]:
    """Every regular file below `location` (relative paths); on a local disk never a symbolic link, whose target
    would lie outside the folder."""
    fs, root = filesystem(location)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    paths = [i.path for i in infos if i.type == pafs.FileType.File]
    if not is_uri(location):
        paths = [p for p in paths if not os.path.islink(p)]
    return sorted(p[len(root) :].lstrip("/") for p in paths)


def _text(folder: Folder, name: str) -> str | None:
    data = folder.read_bytes(name)
    if data is None:
        return None
    return (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8", errors="surrogateescape")


def files_naming(location: str, names: list[str], keys: list[str]) -> list[str]:
    """Those of the files `names` below `location` (a landing zone) holding a line that names one of `keys`."""
    folder = Folder(location)
    return [name for name in names if names_any(_text(folder, name) or "", keys)]


def rewrite_landing_files(location: str, keys: list[str]) -> Rewritten:
    """Every file below `location` (the landing archive) without its lines naming one of `keys`; a file's
    modification time is kept, so its archive retention (`landing_archive_days`) counts from when it landed."""
    folder, files, lines = Folder(location), 0, 0
    for name in _files(location):
        text = _text(folder, name)
        if text is None or not names_any(text, keys):
            continue
        all_lines = text.splitlines(keepends=True)
        kept = [line for line in all_lines if not names_any(line, keys)]
        files, lines = files + 1, lines + len(all_lines) - len(kept)
        if not any(line.strip() for line in kept):
            folder.fs.delete_file(folder.path(name))
            continue
        data = "".join(kept).encode("utf-8", errors="surrogateescape")
        mtime = None if not folder.local else os.stat(folder.path(name)).st_mtime
        folder.write_atomically(name, gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        if mtime is not None:
            os.utime(folder.path(name), (mtime, mtime))
    return Rewritten(files, lines)


def _feed_key(line: str) -> str | None:
    """The record key of a feed line (None: a resolved line, or not a record)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    key = record.get("key") if isinstance(record, dict) else None
    if isinstance(key, list) and key:
        return str(key[0])
    return str(key.get("Id")) if isinstance(key, dict) else None


def rewrite_feed(uri: str, keys: list[str]) -> Rewritten:
    """Every file of the changefeed at `uri` without the records keyed by one of `keys` (15-character forms)."""
    store, files, lines = FeedStore(uri), 0, 0
    for feed_file in store.files():
        all_lines = list(store.lines(feed_file.name))
        kept = [line for line in all_lines if (_feed_key(line) or "")[:15] not in keys]
        if len(kept) == len(all_lines):
            continue
        store.write(feed_file.name, [line + "\n" for line in kept])
        files, lines = files + 1, lines + len(all_lines) - len(kept)
    return Rewritten(files, lines)


def rewrite_staged(warehouse_root: str, table: str, keys: list[str]) -> Rewritten:
    """The history versions staged for `table` (resources/staged.py) without the rows of `keys`: a staged file not
    landed yet (a run died between its two commits) would bring them back when the next run lands it."""
    fs, folder = staged_dir(warehouse_root, table)
    files, rows = 0, 0
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        staged = pq.read_table(info.path, filesystem=fs)
        named = pc.is_in(pc.utf8_slice_codeunits(staged["Id"], 0, 15), pa.array(keys))
        if not pc.any(named).as_py():
            continue
        kept = staged.filter(pc.invert(named))
        temp = f"{folder}/_{info.base_name}.tmp"
        pq.write_table(kept, temp, filesystem=fs)
        fs.move(temp, info.path)
        files, rows = files + 1, rows + staged.num_rows - kept.num_rows
    return Rewritten(files, rows)
