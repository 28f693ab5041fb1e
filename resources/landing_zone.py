"""The landing zone: where a CDC subscriber drops event files (docs/design/contract.md §2).

Files are `*.jsonl` or `*.jsonl.gz`, made visible atomically; names starting with `_` or `.` (at any level) are
in-flight and never read. A visible file is immutable: its relative path, size and modification time identify it (a
name may come back for a new file once the first is retired). Listing and reading go through `pyarrow.fs`, so a
local path and an object-store URI (s3://, gs://, abfs://) work the same way.

Reading never loses a line silently: a file that cannot be decoded at all (truncated gzip, not UTF-8) comes back as
one whole-file quarantine entry, a line longer than `max_line_bytes` is quarantined on its own, and blank lines
(empty or only whitespace: read, but no event) are counted.

Lines end at LF, CRLF or CR only. JSON cannot hold those raw inside a string, but it can hold U+2028, U+0085, form
feeds and other characters that Python's `str.splitlines()` also treats as line ends: free text pasted from a word
processor carries U+2028, and splitting there would cut one event in two bad lines.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import zlib
from dataclasses import dataclass

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pydantic import Field

from resources.storage import filesystem

SUFFIXES = (".jsonl", ".jsonl.gz")
LINES_SCHEMA = pa.schema([("source_file", pa.string()), ("source_line", pa.int64()), ("raw", pa.string())])
QUARANTINE_SCHEMA = pa.schema([
    ("source_file", pa.string()), ("source_line", pa.int64()), ("raw", pa.string()), ("reason", pa.string()),
])
_LINE_END = re.compile(r"\r\n|\r|\n")
RAW_KEPT = 4096  # characters of a bad line kept in quarantine
# CometD names the entity in `entityName`; Datastream in `object` and `source_metadata.object_name`.
_ENTITY = re.compile(rb'"(?:entityName|object|object_name)"\s*:\s*"([A-Za-z0-9_]+)"')
_ENTITY_FIELD = r'"(?:entityName|object|object_name)"\s*:\s*"(?P<entity>[A-Za-z0-9_]+)"'
PEEK_BYTES = 64 * 1024 * 1024


def entities_named(raw: pa.ChunkedArray | pa.Array) -> set[str]:
    """Entity names that lines of landed text mention (the first per line: a CometD `entityName`, a Datastream
    `object`), found in Arrow without parsing the JSON; a superset of what the parse finds, save for JSON that
    spells the key with escapes."""
    if not len(raw):
        return set()
    found = pc.struct_field(pc.extract_regex(raw, _ENTITY_FIELD), "entity")
    return {e for e in pc.unique(found).to_pylist() if e is not None}


@dataclass(frozen=True, order=True)
class LandingFile:
    path: str  # relative to the landing zone root, '/'-separated
    size: int
    # When it was written, as listed (ns since the epoch; None where the store gives none): with the size, it tells
    # a file landed again under a retired file's name from the file ingested (the ledger, cdc_assets/ingest.py).
    modified: int | None = None


def file_set_key(files: list[LandingFile]) -> str:
    """A deterministic key for a set of files (used as a run key)."""
    digest = hashlib.sha256()
    for f in sorted(files):
        digest.update(f"{f.path}\0{f.size}\0{f.modified}\n".encode())
    return digest.hexdigest()[:20]


def utf8_text(data: bytes) -> pa.Array:
    """`data` as one `large_string` value, validated as UTF-8 by Arrow; invalid bytes raise Python's own
    `UnicodeDecodeError`, whose message names the offending byte and its position."""
    try:
        return pa.array([data], pa.large_binary()).cast(pa.large_string())
    except pa.ArrowInvalid:
        data.decode("utf-8")
        raise


def split_lines(text: pa.Array) -> pa.Array:
    """The lines of a JSONL text (`utf8_text`), split at LF, CRLF or CR only; a final line terminator ends the last
    line (it does not start an empty one). Vectorized: no Python object per line."""
    if pc.any(pc.match_substring(text, "\r")).as_py():
        parts = pc.split_pattern_regex(text, _LINE_END.pattern)
    else:
        parts = pc.split_pattern(text, "\n")
    lines = parts.flatten()
    if len(lines) and not lines[-1].as_py():
        lines = lines.slice(0, len(lines) - 1)
    return lines


def _as_string(lines: pa.Array) -> pa.ChunkedArray:
    """`lines` (large_string) as `string` chunks, each under the 2 GiB a `string` array can address."""
    if lines.nbytes < 2**31 - 2**20 or len(lines) < 2:
        return pa.chunked_array([lines.cast(pa.string())], pa.string())
    half = len(lines) // 2
    return pa.chunked_array([*_as_string(lines.slice(0, half)).chunks, *_as_string(lines.slice(half)).chunks],
                            pa.string())


def _visible(rel: str) -> bool:
    return rel.endswith(SUFFIXES) and not any(p.startswith(("_", ".")) for p in rel.split("/"))


@dataclass
class ReadResult:
    lines: pa.Table  # LINES_SCHEMA
    quarantine: pa.Table  # QUARANTINE_SCHEMA (whole files: source_line 0; oversized lines)
    blank_lines: int = 0  # empty or whitespace-only lines: read, counted, not events


class LandingZone(dg.ConfigurableResource):
    """A directory (or object-store prefix) of immutable CDC event files."""

    path: str = Field(description="Local directory or object-store URI of the landing zone.")
    max_line_bytes: int = Field(default=8 * 1024 * 1024, description="Longer lines are quarantined.")

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem(self.path)

    def list_files(self) -> list[LandingFile]:
        """Every visible event file, sorted by path (sorting is for humans; correctness never depends on it)."""
        fs, root = self._fs()
        try:
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
        files = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[len(root):].lstrip("/")
            if _visible(rel):
                files.append(LandingFile(rel, info.size, info.mtime_ns))
        return sorted(files)

    def read(self, files: list[LandingFile]) -> ReadResult:
        """All lines of `files` with their 1-based line numbers; undecodable files and huge lines quarantined,
        blank lines counted."""
        fs, root = self._fs()
        parts: list[pa.Table] = []
        bad: dict[str, list] = {n: [] for n in QUARANTINE_SCHEMA.names}
        blank_count = 0

        def quarantine(path: str, line: int, raw: str, reason: str) -> None:
            for k, v in zip(QUARANTINE_SCHEMA.names, (path, line, raw[:RAW_KEPT], reason)):
                bad[k].append(v)

        for f in files:
            with fs.open_input_stream(f"{root}/{f.path}", compression=None) as stream:
                data = stream.read()
            try:
                if f.path.endswith(".gz"):
                    data = gzip.decompress(data)
                text = utf8_text(data)
            except (OSError, EOFError, zlib.error, UnicodeDecodeError, pa.ArrowInvalid) as exc:
                preview = data[:RAW_KEPT].decode("utf-8", errors="replace")
                quarantine(f.path, 0, preview, f"file unreadable ({type(exc).__name__}: {exc}); whole file quarantined")
                continue
            lines = split_lines(text)
            numbers = pa.array(np.arange(1, len(lines) + 1, dtype=np.int64))
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0)
            blank_count += pc.sum(blank).as_py() or 0
            # The line's length in UTF-8 bytes, as the option and the reason name it.
            long = pc.and_not(pc.greater(pc.binary_length(lines), self.max_line_bytes), blank)
            for number, line in zip(numbers.filter(long).to_pylist(), lines.filter(long).to_pylist()):
                quarantine(f.path, number, line, f"line longer than {self.max_line_bytes} bytes")
            kept = pc.invert(pc.or_(blank, long))
            chosen = _as_string(lines.filter(kept))
            parts.append(pa.table({"source_file": pa.repeat(pa.scalar(f.path, pa.string()), len(chosen)),
                                   "source_line": numbers.filter(kept), "raw": chosen}, schema=LINES_SCHEMA))
        lines_table = pa.concat_tables(parts) if parts else LINES_SCHEMA.empty_table()
        return ReadResult(lines_table, pa.table(bad, schema=QUARANTINE_SCHEMA), blank_count)

    @property
    def archive_path(self) -> str:
        """Where retired files go: a sibling of the landing zone (`<path>_ingested`), so listing the landing zone
        never walks them (a folder inside it would still be listed, only to be skipped)."""
        return self.path.rstrip("/") + "_ingested"

    def retire(self, files: list[LandingFile], *, delete: bool = False) -> int:
        """Move `files` (ingested ones) out of the landing zone into `archive_path` under the same relative path,
        or delete them; a file already gone (another retirement) is skipped. Returns how many were retired."""
        fs, root = self._fs()
        archive = filesystem(self.archive_path)[1]
        done = 0
        for f in files:
            source = f"{root}/{f.path}"
            try:
                if delete:
                    fs.delete_file(source)
                else:
                    target = f"{archive.rstrip('/')}/{f.path}"
                    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
                    fs.move(source, target)
            except FileNotFoundError:
                continue
            done += 1
        return done

    def entities_in(self, files: list[LandingFile]) -> set[str] | None:
        """Entity names the files mention (a cheap scan, not a parse); None if a file could not be scanned."""
        fs, root = self._fs()
        found: set[str] = set()
        for f in files:
            try:
                with fs.open_input_stream(f"{root}/{f.path}", compression=None) as stream:
                    data = stream.read(PEEK_BYTES)
                if f.path.endswith(".gz"):
                    data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error):
                return None
            found.update(m.decode() for m in _ENTITY.findall(data))
        return found
