"""Landing file bytes -> lines: bounded, streamed, and as much of a damaged file as can be trusted
(docs/design/contract.md §2, §9).

- **Bounded.** At most `max_bytes` of text (after decompression) is ever held for one file: a larger file is not
  read. A `.gz` is inflated a slice at a time (zlib's `max_length`), never whole, and a file that inflates to more
  than `max_ratio` times the compressed bytes read so far (once past `RATIO_FLOOR`) is a decompression bomb and is
  not read either: a 2 MB file of zeros would otherwise become 2 GB of memory in a run and in the sensor.
- **A truncated gzip** is read as far as it goes: inflating a prefix of a deflate stream gives exactly a prefix of
  the text, so every line before the cut is right. The incomplete line at the cut (and whatever followed it) is
  lost: `Text.lost` says where.
- **A corrupt gzip** (a zlib error, a wrong checksum) is not read at all: a damaged deflate stream can produce wrong
  bytes for a while before zlib notices, so no part of it can be trusted.
- **UTF-8.** The whole text is validated at once in Arrow (the fast path, no Python object per line); only if that
  fails are the lines decoded one by one, so a bad byte costs its own line (with Python's reason), not the file.

Lines end at LF, CRLF or CR only. JSON cannot hold those raw inside a string, but it can hold U+2028, U+0085, form
feeds and other characters that Python's `str.splitlines()` also treats as line ends: free text pasted from a word
processor carries U+2028, and splitting there would cut one event in two bad lines.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")
READ_CHUNK = 1 << 20  # compressed bytes read at a time: the ratio is checked at least this often
INFLATE_STEP = 8 << 20  # text inflated per zlib call
RATIO_FLOOR = 16 << 20  # below this much text a file is never a bomb, whatever its ratio (small files compress well)
_GZIP = 16 + zlib.MAX_WBITS  # gzip framing only, as `gzip.decompress`


class Unreadable(Exception):
    """The file cannot be read at all: `reason` says why and what to do; `preview` is what was read of it."""

    def __init__(self, reason: str, preview: bytes = b""):
        super().__init__(reason)
        self.reason, self.preview = reason, preview


@dataclass
class Text:
    data: bytes | bytearray  # the text of every line that could be read whole
    lost: str | None = None  # why the rest of the file is missing (a truncated gzip); its lines are then unknown
    tail: bytes | bytearray = b""  # the incomplete line at the cut


@dataclass
class Lines:
    lines: pa.Array  # large_string, one per line (1-based numbers = position + 1); null where not UTF-8
    undecodable: dict[int, tuple[bytes, str]] = field(default_factory=dict)  # line number -> (raw, reason)


def text_bound(size: int, trailer: bytes | None, *, max_bytes: int, max_ratio: float) -> int:
    """The text a `.gz` file of `size` bytes is taken to hold when batches are cut (ingest bounds a batch by its
    text, not by its compressed bytes): the size its gzip trailer gives (ISIZE, the text's length mod 2^32), never
    less than `size`, and never more than `read_text` lets a file grow to (at most `max_bytes`; past `RATIO_FLOOR`
    at most `max_ratio` times `size`), which is also what is assumed when there is no trailer to read. A trailer
    that says less than the text: of a one-member file, a lie zlib catches at its end (the file is corrupt, not
    read); of a file of several members (the last one's length only) or a truncated one, the read ends the batch
    once its text reaches the bound (`LandingZone.read`, `max_text`)."""
    most = min(max_bytes, max(RATIO_FLOOR, int(size * max_ratio)))
    if trailer is None or len(trailer) != 4:
        return most
    return min(most, max(size, int.from_bytes(trailer, "little")))


def peek(stream: BinaryIO, *, gz: bool, limit: int) -> bytes | bytearray:
    """At most `limit` bytes of the file's text from its start (of a truncated gzip, what it has); `Unreadable` if
    it is a corrupt gzip."""
    return _inflate(stream, limit, float("inf"), prefix=True).data if gz else stream.read(limit)


def read_text(stream: BinaryIO, *, gz: bool, size: int, max_bytes: int, max_ratio: float) -> Text:
    """The text of a landing file from `stream` (`size`: its size as listed), within the bounds of the module
    docstring; `Unreadable` when it cannot be read at all."""
    text = _inflate(stream, max_bytes, max_ratio) if gz else Text(_read_plain(stream, size, max_bytes))
    if text.lost is None:
        return text
    cut = max(text.data.rfind(b"\n"), text.data.rfind(b"\r")) + 1
    return Text(text.data[:cut], text.lost, text.data[cut:])


def _too_large(max_bytes: int, what: str) -> str:
    return (
        f"file is larger than max_file_bytes ({max_bytes:,} bytes{what}); not read. Split it into smaller "
        f"files and land them again, or raise max_file_bytes"
    )


def _read_plain(stream: BinaryIO, size: int, max_bytes: int) -> bytes:
    if size > max_bytes:
        raise Unreadable(_too_large(max_bytes, ""))
    parts: list[bytes] = []
    total, want = 0, size + 1  # one read of the listed size, one more to see the end
    while piece := stream.read(want):
        total += len(piece)
        if total > max_bytes:  # it grew since it was listed
            raise Unreadable(_too_large(max_bytes, ""), parts[0][:4096] if parts else piece[:4096])
        parts.append(piece)
        want = READ_CHUNK
    return b"".join(parts)


def _inflate(stream: BinaryIO, max_bytes: int, max_ratio: float, *, prefix: bool = False) -> Text:
    """Every gzip member of `stream` inflated a step at a time (padding zeros after a member skipped, as
    `gzip.decompress` does), within `max_bytes` and `max_ratio`; with `prefix`, the first `max_bytes` of it."""
    out = bytearray()  # grown in place: the peak is the text plus one step, not twice the text
    consumed = members = 0
    inflater = None
    while chunk := stream.read(READ_CHUNK):
        consumed += len(chunk)
        pending, more = chunk, True
        while more:
            if inflater is None:
                pending = pending.lstrip(b"\0") if members else pending
                if not pending:
                    break
                inflater = zlib.decompressobj(_GZIP)
            step = min(INFLATE_STEP, max_bytes - len(out) + (0 if prefix else 1))  # one more: over the bound
            try:
                piece = inflater.decompress(pending, step)
            except zlib.error as exc:
                raise Unreadable(
                    f"gzip data corrupt within its first {consumed:,} compressed bytes (zlib: {exc}); "
                    f"no line of it can be trusted, so none was read. Land an intact copy again",
                    bytes(out[:4096]),
                ) from exc
            out += piece
            if len(out) > max_bytes:
                raise Unreadable(_too_large(max_bytes, " once decompressed"), bytes(out[:4096]))
            if prefix and len(out) == max_bytes:
                return Text(out)
            read = consumed - len(inflater.unconsumed_tail)
            if len(out) > RATIO_FLOOR and len(out) > max_ratio * read:
                raise Unreadable(
                    f"gzip file expands to over {len(out):,} bytes from {read:,} compressed bytes, more "
                    f"than max_gzip_ratio ({max_ratio:g}) times: a decompression bomb, or not CDC "
                    f"events; not read",
                    bytes(out[:4096]),
                )
            if inflater.eof:
                pending, inflater, members = inflater.unused_data, None, members + 1
                more = bool(pending)
            else:
                pending = inflater.unconsumed_tail
                more = bool(pending) or len(piece) == step  # zlib may hold more text for this input
    if inflater is None:
        return Text(out)
    return Text(out, f"gzip file ends at byte {consumed:,}, before the end of its compressed stream (truncated)")


def utf8_text(data: bytes | bytearray) -> pa.Array:
    """`data` as one `large_string` value (no copy), validated as UTF-8 by Arrow: `pa.ArrowInvalid` if it is not."""
    offsets = pa.py_buffer(np.array([0, len(data)], dtype=np.int64))
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)]).cast(pa.large_string())


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


def decode_lines(data: bytes | bytearray) -> Lines:
    """The lines of `data`: all at once in Arrow when it is valid UTF-8, else one by one (module docstring)."""
    try:
        return Lines(split_lines(utf8_text(data)))
    except pa.ArrowInvalid:
        pass
    parts = _LINE_END_BYTES.split(data)
    if parts[-1] == b"":
        parts.pop()
    values: list[str | None] = []
    undecodable = {}
    for number, raw in enumerate(parts, start=1):
        try:
            values.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            values.append(None)
            undecodable[number] = (
                bytes(raw),
                f"line is not UTF-8 ({exc}); line quarantined, the file's other lines "
                f"were read. Fix the writer's encoding",
            )
    return Lines(pa.array(values, pa.large_string()), undecodable)


def as_string(lines: pa.Array) -> pa.ChunkedArray:
    """`lines` (large_string) as `string` chunks, each under the 2 GiB a `string` array can address."""
    if lines.nbytes < 2**31 - 2**20 or len(lines) < 2:
        return pa.chunked_array([lines.cast(pa.string())], pa.string())
    half = len(lines) // 2
    return pa.chunked_array(
        [*as_string(lines.slice(0, half)).chunks, *as_string(lines.slice(half)).chunks], pa.string()
    )
