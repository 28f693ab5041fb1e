"""The landing zone: where a CDC subscriber drops event files (docs/design/contract.md §2).

Files are `*.jsonl` or `*.jsonl.gz`, made visible atomically; names starting with `_` or `.` (at any level) are
in-flight and never read. A visible file is immutable: its relative path, size and modification time identify it (a
name may come back for a new file once the first is retired). An object-store zone (s3://, gs://, abfs://) is listed
and read through `pyarrow.fs`; a local one through `LocalTree`, which never follows a symbolic link
(resources/local_tree.py): anyone who may write the zone may plant one.

**What is not read is counted** (`survey`): a visible entry that is not an event file (`x.JSONL`, `x.ndjson`), a
symbolic link, a FIFO or device, a name that is not UTF-8, and an in-flight file older than
`inflight_stale_seconds` (a writer that died before renaming it). The landing sensor reports them as an observation
of `landing_zone` and fails a check while any is there.

**Reading never loses a line silently** (resources/landing_text.py for the bounds and the decoding): a file that
cannot be read at all (larger than `max_file_bytes`, a decompression bomb, a corrupt gzip, a link swapped in since
the listing) comes back as one whole-file quarantine entry (line 0); a line that is not UTF-8, or longer than
`max_line_bytes`, is quarantined on its own; the incomplete end of a truncated gzip is one entry at the line where
it starts, the lines before it being read; blank lines (empty or only whitespace: read, but no event) are counted.
Each file that lost content this way is in `ReadResult.damaged`, with the objects its lost content names, else those
its readable lines name (`_lost_names`), or None when the file names none at all (the lost part could name any):
ingest asks a resync of them (replication/damaged.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pydantic import Field

from resources.deployment import DeploymentOwned
from resources.landing_text import Unreadable, as_string, decode_lines, peek, read_text, text_bound
from resources.local_tree import LocalTree, Refused
from resources.printable import printable
from resources.storage import filesystem, is_uri

log = logging.getLogger(__name__)

SUFFIXES = (".jsonl", ".jsonl.gz")
LINES_SCHEMA = pa.schema([("source_file", pa.string()), ("source_line", pa.int64()), ("raw", pa.string())])
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source_file", pa.string()),
        ("source_line", pa.int64()),
        ("raw", pa.string()),
        ("reason", pa.string()),
    ]
)
RAW_KEPT = 4096  # characters of a bad line kept in quarantine
# CometD names the entity in `entityName`; Datastream in `object` and `source_metadata.object_name`.
_ENTITY = re.compile(rb'"(?:entityName|object|object_name)"\s*:\s*"([A-Za-z0-9_]+)"')
_ENTITY_FIELD = r'"(?:entityName|object|object_name)"\s*:\s*"(?P<entity>[A-Za-z0-9_]+)"'
PEEK_BYTES = 64 * 1024 * 1024  # of a file's text, for the sensor's scan
MAX_FILE_BYTES = 1 << 30
MAX_GZIP_RATIO = 200.0
INFLIGHT_STALE_SECONDS = 3600.0

# Why a file is not read (`Ignored.why`), as the observation counts them.
NOT_EVENTS = "not *.jsonl or *.jsonl.gz"
LINK = "a symbolic link (never followed)"
SPECIAL = "not a regular file"
NAME_NOT_UTF8 = "a name that is not UTF-8"
STALE_INFLIGHT = "in-flight (name starts with _ or .) for too long: its writer died before renaming it?"


def entities_named(raw: pa.ChunkedArray | pa.Array) -> set[str]:
    """Entity names that lines of landed text mention (the first per line: a CometD `entityName`, a Datastream
    `object`), found in Arrow without parsing the JSON; a superset of what the parse finds, save for JSON that
    spells the key with escapes."""
    if not len(raw):
        return set()
    found = pc.struct_field(pc.extract_regex(raw, _ENTITY_FIELD), "entity")
    return {e for e in pc.unique(found).to_pylist() if e is not None}


def _lost_names(lost: list[bytes], read: pa.ChunkedArray, *, cut: bool = False) -> frozenset[str] | None:
    """The objects a file's lost content names, the one rule for it: each lost line's own (its bytes may still say
    it); for a lost line that names none, and for the lines after a cut (`cut`: a truncated gzip, whose lost lines
    nothing names), the objects the file's lines name; None (any object) only when the file names none at all.

    Why the file's objects and not every replicated one: a resync of every object for each damaged file lets one
    writer keep the whole org resyncing, and the lines around a loss are the best witness of what it held (a file of
    a per-object topic, or Datastream's, holds one object). The guess misses a lost line of an object the rest of
    the file never names: that loss is in `_quarantine`, whose check fails until a person has looked."""
    named = [_ENTITY.search(raw) for raw in lost]
    names = frozenset(m.group(1).decode() for m in named if m)
    if all(named) and not cut:
        return names
    return names | entities_named(read) or None


@dataclass(frozen=True, order=True)
class LandingFile:
    path: str  # relative to the landing zone root, '/'-separated
    size: int
    # When it was written, as listed (ns since the epoch; None where the store gives none): with the size, it tells
    # a file landed again under a retired file's name from the file ingested (the ledger, replication/ingest.py).
    modified: int | None = None


@dataclass(frozen=True)
class Ignored:
    path: str  # relative to the landing zone root, as listed (`printable` before showing it)
    why: str  # NOT_EVENTS, LINK, SPECIAL, NAME_NOT_UTF8 or STALE_INFLIGHT


@dataclass
class Survey:
    """One listing of the zone: the event files, and what it holds that is not read."""

    files: list[LandingFile] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)

    def count(self, why: str) -> int:
        return sum(1 for i in self.ignored if i.why == why)


def file_set_key(files: list[LandingFile]) -> str:
    """A deterministic key for a set of files (used as a run key)."""
    digest = hashlib.sha256()
    for f in sorted(files):
        digest.update(f"{f.path}\0{f.size}\0{f.modified}\n".encode())
    return digest.hexdigest()[:20]


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def _utf8(path: str) -> bool:
    """Whether a listed name is UTF-8 (a local listing decodes other bytes to lone surrogates)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass
class ReadResult:
    lines: pa.Table  # LINES_SCHEMA
    quarantine: pa.Table  # QUARANTINE_SCHEMA (whole files: source_line 0; single lines: their number)
    blank_lines: int = 0  # empty or whitespace-only lines: read, counted, not events
    # Files that lost content -> the objects the lost content names, None when unknown (module docstring).
    damaged: dict[str, frozenset[str] | None] = field(default_factory=dict)
    # Files not read: the text read before them reached the read's `max_text` (a next batch reads them).
    unread: list[LandingFile] = field(default_factory=list)


class _Quarantine:
    """Quarantine entries of one read, and the damage they mean per file (`ReadResult.damaged`)."""

    def __init__(self):
        self.columns: dict[str, list] = {n: [] for n in QUARANTINE_SCHEMA.names}
        self.damaged: dict[str, frozenset[str] | None] = {}

    def add(self, path: str, line: int, raw: str, reason: str) -> None:
        for k, v in zip(QUARANTINE_SCHEMA.names, (path, line, raw[:RAW_KEPT], reason)):
            self.columns[k].append(v)

    def lost(self, path: str, names: frozenset[str] | None) -> None:
        """`path` lost content naming `names` (None: any object)."""
        known = self.damaged.get(path, frozenset())
        self.damaged[path] = None if names is None or known is None else known | names

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=QUARANTINE_SCHEMA)


def _preview(data: bytes) -> str:
    return data[:RAW_KEPT].decode("utf-8", errors="replace")


class LandingZone(DeploymentOwned):
    """A directory (or object-store prefix) of immutable CDC event files."""

    DEPLOYMENT_FIELDS = frozenset({"path"})  # where the events are (resources/deployment.py)

    path: str = Field(description="Local directory or object-store URI of the landing zone.")
    max_line_bytes: int = Field(default=8 * 1024 * 1024, description="Longer lines are quarantined.")
    max_file_bytes: int = Field(
        default=MAX_FILE_BYTES,
        description=(
            "A file holding more text than this (after decompression) is not read but quarantined whole: a run holds "
            "one file's text in memory."
        ),
    )
    max_gzip_ratio: float = Field(
        default=MAX_GZIP_RATIO,
        description=(
            "A .gz file whose text grows past 16 MiB at more than this many times its compressed size is a "
            "decompression bomb: quarantined whole, never inflated further."
        ),
    )
    inflight_stale_seconds: float = Field(
        default=INFLIGHT_STALE_SECONDS,
        description=(
            "An in-flight file (_x.jsonl) older than this is reported: its writer probably died before renaming it."
        ),
    )

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem(self.path)

    def _local(self) -> LocalTree | None:
        return None if is_uri(self.path) else LocalTree(self._fs()[1])

    def list_files(self) -> list[LandingFile]:
        """Every visible event file, sorted by path (sorting is for humans; correctness never depends on it)."""
        return self.survey().files

    def survey(self, now: float | None = None) -> Survey:
        """The event files, and every entry the zone holds that is not read (module docstring); folders whose name
        starts with `_` or `.` are not looked into."""
        now = time.time() if now is None else now
        survey = Survey()
        for path, kind, size, mtime, mtime_ns in self._entries():
            *_, name = path.split("/")
            if _hidden(name):
                if kind == "file" and name.endswith(SUFFIXES) and now - mtime > self.inflight_stale_seconds:
                    survey.ignored.append(Ignored(path, STALE_INFLIGHT))
            elif not _utf8(path):
                survey.ignored.append(Ignored(path, NAME_NOT_UTF8))
            elif kind == "link":
                survey.ignored.append(Ignored(path, LINK))
            elif kind != "file":
                survey.ignored.append(Ignored(path, SPECIAL))
            elif not name.endswith(SUFFIXES):
                survey.ignored.append(Ignored(path, NOT_EVENTS))
            else:
                survey.files.append(LandingFile(path, size, mtime_ns))
        survey.files.sort()
        survey.ignored.sort(key=lambda i: i.path)
        return survey

    def _entries(self) -> Iterator[tuple[str, str, int, float, int | None]]:
        """(path, kind, size, mtime in s, mtime in ns) of every entry below the root but folders, not entering hidden
        folders."""
        if (tree := self._local()) is not None:
            for e in tree.walk(descend=lambda path: not _hidden(path.rsplit("/", 1)[-1])):
                yield e.path, e.kind, e.size, e.mtime, e.mtime_ns
            return
        fs, root = self._fs()
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return
        for info in infos:
            path = info.path[len(root) :].lstrip("/")
            if info.type == pafs.FileType.File and not any(_hidden(p) for p in path.split("/")[:-1]):
                yield path, "file", info.size, info.mtime.timestamp() if info.mtime else time.time(), info.mtime_ns

    @contextmanager
    def _open(self, path: str) -> Iterator[BinaryIO]:
        if (tree := self._local()) is not None:
            with tree.open(path) as stream:
                yield stream
            return
        fs, root = self._fs()
        with fs.open_input_stream(f"{root}/{path}", compression=None) as stream:
            yield stream

    def text_size(self, f: LandingFile) -> int:
        """The bytes of text reading `f` may hold: its size, or for a `.gz` what it inflates to (`text_bound`, from
        the gzip trailer: one 4-byte read)."""
        if not f.path.endswith(".gz"):
            return f.size
        try:
            trailer: bytes | None = self._tail(f, 4)
        except OSError:  # gone or swapped since the listing: the read says why
            trailer = None
        return text_bound(f.size, trailer, max_bytes=self.max_file_bytes, max_ratio=self.max_gzip_ratio)

    def _tail(self, f: LandingFile, n: int) -> bytes:
        """The last `n` bytes of `f` as listed (links refused, as every read here)."""
        if self._local() is not None:
            with self._open(f.path) as stream:
                stream.seek(max(0, f.size - n))
                return stream.read(n)
        fs, root = self._fs()
        with fs.open_input_file(f"{root}/{f.path}") as handle:
            return handle.read_at(min(n, f.size), max(0, f.size - n))

    def read(self, files: list[LandingFile], max_text: int | None = None) -> ReadResult:
        """All lines of `files` with their 1-based line numbers; what cannot be read quarantined (module
        docstring), blank lines counted. With `max_text`, no file is begun once the text read reaches it: the
        rest are `unread` (a `.gz` whose trailer claimed less than it holds, `text_size`, ends a batch early
        instead of swelling it)."""
        parts: list[pa.Table] = []
        bad = _Quarantine()
        blank_count = 0
        held = 0
        for i, f in enumerate(files):
            if max_text is not None and i and held >= max_text:
                return ReadResult(*self._gathered(parts, bad, blank_count), unread=files[i:])
            try:
                with self._open(f.path) as stream:
                    text = read_text(
                        stream,
                        gz=f.path.endswith(".gz"),
                        size=f.size,
                        max_bytes=self.max_file_bytes,
                        max_ratio=self.max_gzip_ratio,
                    )
            except Unreadable as exc:
                bad.add(f.path, 0, _preview(exc.preview), f"{exc.reason}; whole file quarantined")
                bad.lost(f.path, None)
                continue
            except OSError as exc:  # a link or FIFO swapped in since the listing, the file gone, an I/O error
                bad.add(
                    f.path,
                    0,
                    "",
                    f"file unreadable ({type(exc).__name__}: {exc}); whole file quarantined. A "
                    f"landed file must be a regular file (links are never followed) that stays "
                    f"until it is ingested: land it again if its events are wanted",
                )
                bad.lost(f.path, None)
                continue
            held += len(text.data)
            decoded = decode_lines(text.data)
            lines = decoded.lines
            numbers = pa.array(np.arange(1, len(lines) + 1, dtype=np.int64))
            lost_lines = []  # the raw text of each line lost on its own
            for number, (raw, reason) in decoded.undecodable.items():
                bad.add(f.path, number, raw.decode("utf-8", errors="backslashreplace"), reason)
                lost_lines.append(raw)
            undecodable = pc.is_null(lines)
            blank = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0), False)
            blank_count += pc.sum(blank).as_py() or 0
            # The line's length in UTF-8 bytes, as the option and the reason name it.
            long = pc.fill_null(pc.and_not(pc.greater(pc.binary_length(lines), self.max_line_bytes), blank), False)
            for number, line in zip(numbers.filter(long).to_pylist(), lines.filter(long).to_pylist()):
                bad.add(f.path, number, line, f"line longer than {self.max_line_bytes} bytes")
                lost_lines.append(line.encode())
            kept = pc.invert(pc.or_(pc.or_(blank, long), undecodable))
            chosen = as_string(lines.filter(kept))
            if text.lost is not None:
                bad.add(
                    f.path,
                    len(lines) + 1,
                    text.tail.decode("utf-8", errors="backslashreplace"),
                    f"{text.lost}: this line is incomplete and the lines after it are lost; the {len(lines)} "
                    f"lines before it were read. Land a complete copy again if the writer has one",
                )
                lost_lines.append(bytes(text.tail))
            if lost_lines:
                bad.lost(f.path, _lost_names(lost_lines, chosen, cut=text.lost is not None))
            parts.append(
                pa.table(
                    {
                        "source_file": pa.repeat(pa.scalar(f.path, pa.string()), len(chosen)),
                        "source_line": numbers.filter(kept),
                        "raw": chosen,
                    },
                    schema=LINES_SCHEMA,
                )
            )
        return ReadResult(*self._gathered(parts, bad, blank_count))

    @staticmethod
    def _gathered(
        parts: list[pa.Table], bad: _Quarantine, blank_count: int
    ) -> tuple[pa.Table, pa.Table, int, dict[str, frozenset[str] | None]]:
        lines_table = pa.concat_tables(parts) if parts else LINES_SCHEMA.empty_table()
        return lines_table, bad.table(), blank_count, bad.damaged

    @property
    def archive_path(self) -> str:
        """Where retired files go: a sibling of the landing zone (`<path>_ingested`), so listing the landing zone
        never walks them (a folder inside it would still be listed, only to be skipped)."""
        return self.path.rstrip("/") + "_ingested"

    @property
    def quarantined_path(self) -> str:
        """Where ingested files that had quarantined content go instead (`<path>_quarantined`): kept, never deleted,
        for a person to look at."""
        return self.path.rstrip("/") + "_quarantined"

    def retire(self, files: list[LandingFile], *, delete: bool = False, to: str | None = None) -> int:
        """Move `files` (ingested ones) out of the landing zone into `to` (default `archive_path`) under the same
        relative path, or delete them; a file already gone (another retirement) is skipped. Never replaces a file
        there: a name taken gets `-<n>` before its suffix (`x.jsonl` -> `x-1.jsonl`). Returns how many were
        retired."""
        destination = to or self.archive_path
        if (tree := self._local()) is not None:
            target = LocalTree(filesystem(destination)[1])

            def act(path: str, into: str) -> None:
                if delete:
                    tree.delete(path)
                else:
                    tree.move_to(path, target, into)
        else:
            fs, root = self._fs()
            archive = filesystem(destination)[1].rstrip("/")

            def act(path: str, into: str) -> None:
                if delete:
                    fs.delete_file(f"{root}/{path}")
                    return
                if fs.get_file_info(f"{archive}/{into}").type != pafs.FileType.NotFound:
                    raise FileExistsError(into)
                fs.create_dir(f"{archive}/{into}".rsplit("/", 1)[0], recursive=True)
                fs.move(f"{root}/{path}", f"{archive}/{into}")

        done = 0
        for f in files:
            try:
                _without_overwriting(functools.partial(act, f.path), f.path)
            except FileNotFoundError:
                continue
            except Refused as exc:  # a link swapped in since the listing: neither it nor its target is touched
                log.warning("Landing file %s not retired: %s", printable(f.path), exc.strerror)
                continue
            done += 1
        return done

    def entities_in(self, files: list[LandingFile]) -> set[str] | None:
        """Entity names the files mention in their first `PEEK_BYTES` of text (a cheap scan, not a parse; never
        more is read or inflated); None if a file could not be scanned."""
        found: set[str] = set()
        for f in files:
            try:
                with self._open(f.path) as stream:
                    data = peek(stream, gz=f.path.endswith(".gz"), limit=PEEK_BYTES)
            except (OSError, Unreadable, Refused):
                return None
            found.update(m.decode() for m in _ENTITY.findall(data))
        return found


def _without_overwriting(move, path: str) -> None:
    """`move(name)` with `path`, else the first free `<stem>-<n><suffix>` (`move` raises FileExistsError when taken)."""
    suffix = next((s for s in sorted(SUFFIXES, key=len, reverse=True) if path.endswith(s)), "")
    stem = path[: len(path) - len(suffix)]
    for n in range(1_000_000):
        try:
            return move(path if n == 0 else f"{stem}-{n}{suffix}")
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: a million archived copies already")
