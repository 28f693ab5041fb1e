"""LandingZone.read cuts lines in Arrow (no Python object per line): it must give exactly what reading the file
line by line gives (docs/design/contract.md §2): lines end at LF, CRLF or CR only, blank lines (Unicode whitespace only)
are counted, lines longer than `max_line_bytes` bytes of UTF-8 are quarantined with their number, a final terminator
starts no line."""

from __future__ import annotations

import gzip
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from resources.landing_zone import RAW_KEPT, LandingFile, LandingZone

# Pieces that stress the cutting: every line end, the characters other splitters take for one, Unicode whitespace
# (a line of them only is blank), multi-byte characters (a length in characters is not one in bytes).
PIECES = ["\n", "\r\n", "\r", "\n\r", "\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1c", " ", "\t", "\u3000",
          "\xa0", "x", "{}", "é", "😀", "日本", '"q"']
MAX = 6


def reference(text: str, max_line: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]], int]:
    """Line by line in Python: (kept lines, oversized lines, blank count), each line with its 1-based number."""
    lines = re.split(r"\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()
    kept, long, blank = [], [], 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            blank += 1
        elif len(line.encode()) > max_line:
            long.append((number, line[:RAW_KEPT]))
        else:
            kept.append((number, line))
    return kept, long, blank


def read(tmp_path, name: str, data: bytes, max_line: int = MAX):
    (tmp_path / name).write_bytes(data)
    return LandingZone(path=str(tmp_path), max_line_bytes=max_line).read([LandingFile(name, len(data))])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_lines_numbers_blanks_and_oversized_lines_are_those_of_a_line_by_line_read(tmp_path_factory, pieces):
    text = "".join(pieces)
    result = read(tmp_path_factory.mktemp("landing"), "f.jsonl", text.encode())
    kept, long, blank = reference(text, MAX)
    assert list(zip(result.lines["source_line"].to_pylist(), result.lines["raw"].to_pylist())) == kept
    assert set(result.lines["source_file"].to_pylist()) <= {"f.jsonl"}
    assert [(q["source_line"], q["raw"]) for q in result.quarantine.to_pylist()] == long
    assert all(q["reason"] == f"line longer than {MAX} bytes" for q in result.quarantine.to_pylist())
    assert result.blank_lines == blank


def test_files_keep_their_own_numbering_and_order_and_gz_reads_as_its_text(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'{"a":1}\r\n\r\n{"a":2}')
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress('{"b":"\u2028"}\n{"b":2}\n'.encode()))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    zone = LandingZone(path=str(tmp_path))
    result = zone.read(zone.list_files())
    assert result.lines.to_pylist() == [
        {"source_file": "a.jsonl", "source_line": 1, "raw": '{"a":1}'},
        {"source_file": "a.jsonl", "source_line": 3, "raw": '{"a":2}'},
        {"source_file": "b.jsonl.gz", "source_line": 1, "raw": '{"b":"\u2028"}'},
        {"source_file": "b.jsonl.gz", "source_line": 2, "raw": '{"b":2}'},
    ]
    assert (result.blank_lines, result.quarantine.num_rows) == (1, 0)


def test_bytes_that_are_not_utf8_quarantine_the_file_with_pythons_reason(tmp_path):
    for name, data in {"latin1.jsonl": "Caf\xe9\n".encode("latin-1"), "surrogate.jsonl": b'{"a":"\xed\xa0\x80"}\n',
                       "overlong.jsonl": b'{"a":"\xc0\xaf"}\n'}.items():
        result = read(tmp_path, name, data, max_line=100)
        assert result.lines.num_rows == 0
        [entry] = result.quarantine.to_pylist()
        assert (entry["source_line"], entry["reason"][:37]) == (0, "file unreadable (UnicodeDecodeError: ")
