"""Where a changefeed lives: one folder (a local path or an object-store URI, through `pyarrow.fs`) per replica.

```
<uri>/<Object>/table.json        the replica the feed follows (Delta table id and creation time), written first
<uri>/<Object>/<first>-<last>-<resolved>.jsonl   changes of replica versions first..last; resolved: the feed's
                                  resolved step after `last` (replication/changefeed/clock.py)
<uri>/<Object>/resolved.json     the newest heartbeat, rewritten by every export
```

A file is named by the replica versions it covers and the resolved step it ends at, each zero-padded to 20 digits
so that name order is feed order. It is written under `_<name>.tmp` and renamed into place (atomic on a local
disk; on an object store the upload itself is all-or-nothing), so a reader never sees half a file and a visible
file never changes. The exporter's checkpoint is the newest file's name (last version, resolved step) and
`table.json` (which table those versions belong to).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow.fs as pafs

from resources.storage import filesystem

FILE = re.compile(r"^(\d{20})-(\d{20})-(\d{20})\.jsonl$")
RESOLVED = "resolved.json"
IDENTITY = "table.json"


def feed_file_name(first: int, last: int, resolved: int) -> str:
    return f"{first:020d}-{last:020d}-{resolved:020d}.jsonl"


@dataclass(frozen=True)
class FeedFile:
    name: str
    first: int
    last: int
    resolved: int  # the feed's resolved step at the end of this file


class FeedStore:
    """The files of one replica's feed."""

    def __init__(self, uri: str):
        self.fs, self.root = filesystem(uri)
        self.uri = uri

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def _names(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return [i.base_name for i in infos if i.type == pafs.FileType.File]

    def files(self) -> list[FeedFile]:
        """The visible feed files, in feed order."""
        found = [FeedFile(n, int(m[1]), int(m[2]), int(m[3])) for n in self._names() if (m := FILE.match(n))]
        return sorted(found, key=lambda f: (f.first, f.last))

    def newest(self) -> FeedFile | None:
        """The newest file: the feed's position (None: nothing exported yet)."""
        files = self.files()
        return files[-1] if files else None

    def position(self) -> int | None:
        """The last replica version the feed covers (None: nothing exported yet)."""
        newest = self.newest()
        return newest.last if newest else None

    def drop_leftovers(self) -> list[str]:
        """Delete temporary files a crashed export left (one writer per feed: none is being written now)."""
        left = [n for n in self._names() if n.startswith("_") and n.endswith(".tmp")]
        for name in left:
            self.fs.delete_file(self._path(name))
        return left

    def write(self, name: str, lines: Iterable[str], *, before_rename=None) -> int:
        """Write `name` atomically (tmp, then rename); returns bytes written."""
        self.fs.create_dir(self.root, recursive=True)
        tmp = self._path(f"_{name}.tmp")
        size = 0
        with self.fs.open_output_stream(tmp) as out:
            for text in lines:
                data = text.encode("utf-8")
                out.write(data)
                size += len(data)
        if before_rename is not None:
            before_rename()
        self.fs.move(tmp, self._path(name))
        return size

    def lines(self, name: str) -> Iterator[str]:
        """The file's lines, streamed (a chunk at a time, never the whole file)."""
        # Lines end at LF only: a value may hold U+2028 or U+0085, which str.splitlines() would also split at.
        # Splitting the bytes at LF is safe in UTF-8 (no multi-byte character holds the byte 0x0A).
        with self.fs.open_input_stream(self._path(name)) as stream:
            rest = b""
            while chunk := stream.read(1 << 20):
                *complete, rest = (rest + chunk).split(b"\n")
                yield from (c.decode("utf-8") for c in complete)
        if rest:
            yield rest.decode("utf-8")

    def write_resolved(self, heartbeat: dict) -> None:
        self.write(RESOLVED, [json.dumps(heartbeat, sort_keys=True) + "\n"])

    def read_resolved(self) -> dict | None:
        return self._read_json(RESOLVED)

    def write_identity(self, identity: dict) -> None:
        self.write(IDENTITY, [json.dumps(identity, sort_keys=True) + "\n"])

    def read_identity(self) -> dict | None:
        """The table the feed follows (None: no feed yet, or its `table.json` is gone)."""
        return self._read_json(IDENTITY)

    def _read_json(self, name: str) -> dict | None:
        try:
            with self.fs.open_input_stream(self._path(name)) as stream:
                return json.loads(stream.read().decode("utf-8"))
        except FileNotFoundError:
            return None
