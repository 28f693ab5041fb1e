"""Where a changefeed lives: one folder (a local path or an object-store URI, through `pyarrow.fs`) per replica.

```
<uri>/<Object>/00000000000000000007-00000000000000000007.jsonl   the first export: start version (+ initial scan)
<uri>/<Object>/00000000000000000008-00000000000000000012.jsonl   changes of replica versions 8..12, then `resolved`
<uri>/<Object>/resolved.json                                      the newest heartbeat, rewritten by every export
```

A file is named by the replica versions it covers, zero-padded so that name order is feed order. It is written
under `_<name>.tmp` and renamed into place (atomic on a local disk; on an object store the upload itself is
all-or-nothing), so a reader never sees half a file and a visible file never changes. The exporter's checkpoint is
the last version of the newest file: nothing is kept beside the files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

FILE = re.compile(r"^(\d{20})-(\d{20})\.jsonl$")
RESOLVED = "resolved.json"


def feed_file_name(first: int, last: int) -> str:
    return f"{first:020d}-{last:020d}.jsonl"


@dataclass(frozen=True)
class FeedFile:
    name: str
    first: int
    last: int


class FeedStore:
    """The files of one replica's feed."""

    def __init__(self, uri: str):
        if "://" in uri:
            self.fs, self.root = pafs.FileSystem.from_uri(uri)
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(uri).resolve())
        self.uri = uri

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def _names(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return [i.base_name for i in infos if i.type == pafs.FileType.File]

    def files(self) -> list[FeedFile]:
        """The visible feed files, in feed order."""
        found = [FeedFile(n, int(m[1]), int(m[2])) for n in self._names() if (m := FILE.match(n))]
        return sorted(found, key=lambda f: (f.first, f.last))

    def position(self) -> int | None:
        """The last replica version the feed covers (None: nothing exported yet)."""
        files = self.files()
        return max(f.last for f in files) if files else None

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
        with self.fs.open_input_stream(self._path(name)) as stream:
            text = stream.read().decode("utf-8")
        # Lines end at LF only: a value may hold U+2028 or U+0085, which str.splitlines() would also split at.
        yield from text.removesuffix("\n").split("\n") if text else ()

    def write_resolved(self, heartbeat: dict) -> None:
        self.write(RESOLVED, [json.dumps(heartbeat, sort_keys=True) + "\n"])

    def read_resolved(self) -> dict | None:
        try:
            with self.fs.open_input_stream(self._path(RESOLVED)) as stream:
                return json.loads(stream.read().decode("utf-8"))
        except FileNotFoundError:
            return None
