"""LandingZone.read cuts lines in Arrow (no Python object per line): it must give exactly what reading the file
line by line gives (docs/design/contract.md §2): lines end at LF, CRLF or CR only, blank lines (Unicode whitespace only)
are counted, lines longer than `max_line_bytes` bytes of UTF-8 are quarantined with their number, a final terminator
starts no line."""

from __future__ import annotations

import gzip
import os
import re
import struct
import tracemalloc
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from resources.landing_zone import NAME_NOT_UTF8, PEEK_BYTES, RAW_KEPT, LandingFile, LandingZone, printable
from salesforce_emulator.landing_lines import event

A1 = "001000000000001AAA"
T0 = 1_763_800_000_000

# Pieces that stress the cutting: every line end, the characters other splitters take for one, Unicode whitespace
# (a line of them only is blank), multi-byte characters (a length in characters is not one in bytes).
PIECES = [
    "\n",
    "\r\n",
    "\r",
    "\n\r",
    "\u2028",
    "\u2029",
    "\x85",
    "\x0c",
    "\x0b",
    "\x1c",
    " ",
    "\t",
    "\u3000",
    "\xa0",
    "x",
    "{}",
    "é",
    "😀",
    "日本",
    '"q"',
]
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


def test_a_line_that_is_not_utf8_is_quarantined_alone_with_pythons_reason(tmp_path):
    """One bad byte costs its line, not the file: the other lines are read, and the objects the bad line names (or,
    when it names none, those the file's readable lines name) are reported damaged for a resync."""
    good = [event("Account", "CREATE", [A1], T0, Name="Acme"), event("Account", "UPDATE", [A1], T0 + 1, Name="B")]
    cases = {
        "latin1.jsonl": '{"entityName": "Contact", "Name": "Caf\xe9"}'.encode("latin-1"),
        "surrogate.jsonl": b'{"a":"\xed\xa0\x80"}',
        "overlong.jsonl": b'{"a":"\xc0\xaf"}',
    }
    for name, bad in cases.items():
        result = read(
            tmp_path, name, good[0].encode() + b"\n" + bad + b"\r\n" + good[1].encode() + b"\n", max_line=10_000
        )
        assert list(zip(result.lines["source_line"].to_pylist(), result.lines["raw"].to_pylist())) == [
            (1, good[0]),
            (3, good[1]),
        ]
        [entry] = result.quarantine.to_pylist()
        assert entry["source_line"] == 2
        assert entry["reason"].startswith("line is not UTF-8 ('utf-8' codec can't decode byte")
        assert entry["raw"] == bad.decode("utf-8", errors="backslashreplace")
        assert result.damaged == {name: frozenset({"Contact"} if name == "latin1.jsonl" else {"Account"})}


def test_a_file_of_bad_lines_naming_no_object_is_damaged_for_every_object(tmp_path):
    result = read(tmp_path, "junk.jsonl", b"\xff\xfe junk\n", max_line=100)
    assert result.lines.num_rows == 0 and result.quarantine["source_line"].to_pylist() == [1]
    assert result.damaged == {"junk.jsonl": None}


def test_a_truncated_gzip_is_read_as_far_as_it_goes(tmp_path):
    lines = [event("Account", "UPDATE", [A1], T0 + n, Name=f"name {n} " + "é" * 50) for n in range(2000)]
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    cut = len(whole) // 2
    result = read(tmp_path, "cut.jsonl.gz", whole[:cut], max_line=10_000)

    read_lines = result.lines["raw"].to_pylist()
    assert 0 < len(read_lines) < len(lines) and read_lines == lines[: len(read_lines)]
    assert result.lines["source_line"].to_pylist() == list(range(1, len(read_lines) + 1))
    [tail] = result.quarantine.to_pylist()
    assert tail["source_line"] == len(read_lines) + 1
    assert tail["reason"].startswith(f"gzip file ends at byte {cut:,}, before the end of its compressed stream")
    assert lines[len(read_lines)].startswith(tail["raw"].split("\\x")[0])  # a cut character shows escaped
    assert result.damaged == {"cut.jsonl.gz": frozenset({"Account"})}  # what its readable lines name


def test_the_lost_part_of_a_file_is_taken_for_the_objects_the_file_names_and_for_any_when_it_names_none(tmp_path):
    """A truncated gzip's lost lines name nothing: they stand for the objects its readable lines (and its cut line)
    name; a file that names none at all stands for any object (None: every replicated object resyncs)."""
    lines = [event("Account", "UPDATE", [A1], T0 + n, Name=f"name {n}") for n in range(2000)]
    lines += [event("Contact", "UPDATE", ["003000000000001AAA"], T0 + n, LastName=f"n {n}") for n in range(100)]
    mixed = gzip.compress(("\n".join(lines) + "\n").encode())  # cut in its Account lines: Contact's are lost
    assert read(tmp_path, "mixed.jsonl.gz", mixed[: len(mixed) // 2], max_line=10_000).damaged == {
        "mixed.jsonl.gz": frozenset({"Account"})
    }
    nameless = gzip.compress(b'{"a": 1}\n' * 10_000)
    assert read(tmp_path, "nameless.jsonl.gz", nameless[:-12], max_line=10_000).damaged == {"nameless.jsonl.gz": None}
    # A bad line naming Contact in a file whose other lines name nothing: Contact, not every object.
    named = read(tmp_path, "named.jsonl", b'{"a": 1}\n{"entityName": "Contact", "x": "\xff"}\n', max_line=10_000)
    assert named.damaged == {"named.jsonl": frozenset({"Contact"})}


def test_a_corrupt_gzip_is_not_trusted_at_all(tmp_path):
    data = bytearray(
        gzip.compress(
            ("\n".join(event("Account", "UPDATE", [A1], T0 + n, Name=str(n)) for n in range(500)) + "\n").encode()
        )
    )
    data[-6] ^= 0xFF  # the CRC-32 of the trailer: every byte inflated may be wrong
    result = read(tmp_path, "crc.jsonl.gz", bytes(data), max_line=10_000)
    assert result.lines.num_rows == 0
    [entry] = result.quarantine.to_pylist()
    assert entry["source_line"] == 0 and entry["reason"].startswith("gzip data corrupt within its first")
    assert "whole file quarantined" in entry["reason"] and result.damaged == {"crc.jsonl.gz": None}


def test_members_and_padding_of_a_gzip_file_read_as_gzip_decompress_reads_them(tmp_path):
    data = gzip.compress(b'{"a":1}\n') + gzip.compress(b'{"a":2}\n') + b"\0" * 10
    assert gzip.decompress(data) == b'{"a":1}\n{"a":2}\n'
    result = read(tmp_path, "members.jsonl.gz", data, max_line=100)
    assert result.lines["raw"].to_pylist() == ['{"a":1}', '{"a":2}'] and not result.quarantine.num_rows


def write_gzip_bomb(path, text_bytes: int) -> int:
    """A gzip file of `text_bytes` zeros (a multiple of 1 MiB), written a block at a time: every 1 MiB of zeros
    deflates, after a full flush, to the same block, so the file is built without compressing it all. Returns its
    size."""
    mib = bytes(1 << 20)
    raw = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = raw.compress(mib) + raw.flush(zlib.Z_FULL_FLUSH)
    assert raw.compress(mib) + raw.flush(zlib.Z_FULL_FLUSH) == block
    end = raw.flush()
    with open(path, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        crc = 0
        for _n in range(text_bytes >> 20):
            out.write(block)
            crc = zlib.crc32(mib, crc)
        out.write(end + struct.pack("<II", crc, text_bytes & 0xFFFFFFFF))
    return path.stat().st_size


def test_a_gzip_bomb_is_quarantined_after_a_bounded_inflate_in_the_run_and_in_the_sensor(tmp_path):
    size = write_gzip_bomb(tmp_path / "bomb.jsonl.gz", 2 << 30)
    assert size < 4 << 20  # 2 GiB of text in a few MB
    zone = LandingZone(path=str(tmp_path))
    [bomb] = zone.list_files()
    tracemalloc.start()
    try:
        result = zone.read([bomb])
        read_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert zone.entities_in([bomb]) == set()
        scan_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [entry] = result.quarantine.to_pylist()
    assert (entry["source_file"], entry["source_line"]) == ("bomb.jsonl.gz", 0)
    assert "more than max_gzip_ratio (200) times: a decompression bomb" in entry["reason"]
    assert result.lines.num_rows == 0 and result.damaged == {"bomb.jsonl.gz": None}
    assert read_peak < 128 << 20 and scan_peak < 3 * PEEK_BYTES  # not 2 GiB


def test_a_file_over_max_file_bytes_is_quarantined_whole(tmp_path):
    text = ("\n".join(event("Account", "UPDATE", [A1], T0 + n, Name=str(n)) for n in range(100)) + "\n").encode()
    (tmp_path / "big.jsonl").write_bytes(text)
    (tmp_path / "big.jsonl.gz").write_bytes(gzip.compress(text))
    (tmp_path / "small.jsonl").write_bytes(text[:1000].rsplit(b"\n", 1)[0] + b"\n")
    zone = LandingZone(path=str(tmp_path), max_file_bytes=len(text) - 1)
    result = zone.read(zone.list_files())
    reasons = {q["source_file"]: (q["source_line"], q["reason"]) for q in result.quarantine.to_pylist()}
    assert set(reasons) == {"big.jsonl", "big.jsonl.gz"} and {r[0] for r in reasons.values()} == {0}
    assert reasons["big.jsonl"][1].startswith(f"file is larger than max_file_bytes ({len(text) - 1:,} bytes)")
    assert reasons["big.jsonl.gz"][1].startswith(
        f"file is larger than max_file_bytes ({len(text) - 1:,} bytes once decompressed)"
    )
    assert set(result.lines["source_file"].to_pylist()) == {"small.jsonl"}
    assert result.damaged == {"big.jsonl": None, "big.jsonl.gz": None}
    assert LandingZone(path=str(tmp_path), max_file_bytes=len(text)).read(zone.list_files()).quarantine.num_rows == 0


def test_a_link_or_fifo_swapped_in_after_the_listing_is_neither_read_nor_retired_through(tmp_path):
    """Listing never follows a link (resources/local_tree.py); a file or folder replaced by one between the listing
    and the read, or the retirement, is refused rather than followed, and a FIFO is not opened for a blocking read."""
    outside, zone = tmp_path / "outside", tmp_path / "zone"
    (outside / "d").mkdir(parents=True)
    (zone / "d").mkdir(parents=True)
    secret = "SECRET-KEY-MATERIAL"
    for target in (outside / "secret.jsonl", outside / "d" / "x.jsonl"):
        target.write_text(event("Account", "CREATE", [A1], T0, Name=secret) + "\n")
    for name in ("a.jsonl", "d/x.jsonl", "p.jsonl"):
        (zone / name).write_text(event("Account", "CREATE", [A1], T0, Name="Acme") + "\n")
    landing = LandingZone(path=str(zone))
    listed = landing.list_files()
    assert [f.path for f in listed] == ["a.jsonl", "d/x.jsonl", "p.jsonl"]

    (zone / "a.jsonl").unlink()
    (zone / "a.jsonl").symlink_to(outside / "secret.jsonl")
    (zone / "d").rename(zone / "d-moved")
    (zone / "d").symlink_to(outside / "d", target_is_directory=True)
    (zone / "p.jsonl").unlink()
    os.mkfifo(zone / "p.jsonl")
    result = landing.read(listed)
    assert result.lines.num_rows == 0 and secret not in str(result.quarantine.to_pylist())
    assert {q["source_file"]: q["source_line"] for q in result.quarantine.to_pylist()} == {
        "a.jsonl": 0,
        "d/x.jsonl": 0,
        "p.jsonl": 0,
    }
    assert all(q["reason"].startswith("file unreadable (Refused: ") for q in result.quarantine.to_pylist())
    assert landing.entities_in(listed[:1]) is None and landing.entities_in(listed[1:2]) is None

    assert landing.retire(listed) == 0 and landing.retire(listed, delete=True) == 0
    assert (outside / "secret.jsonl").exists() and (outside / "d" / "x.jsonl").exists()
    assert (zone / "a.jsonl").is_symlink() and not Path(landing.archive_path).exists()


def test_a_name_that_is_not_utf8_is_reported_not_listed(tmp_path):
    for name in (b"bad\xff.jsonl", b"_inflight\xff.jsonl", b"ok.jsonl"):
        with open(os.path.join(os.fsencode(tmp_path), name), "wb") as handle:
            handle.write(b"{}\n")
    zone = LandingZone(path=str(tmp_path))
    assert [f.path for f in zone.list_files()] == ["ok.jsonl"]  # a listing that stops at it stops every run
    survey = zone.survey()
    [ignored] = survey.ignored  # the in-flight one is a writer's business until it is stale
    assert ignored.why == NAME_NOT_UTF8 and printable(ignored.path) == "bad\\udcff.jsonl"
    assert zone.read(survey.files).lines.num_rows == 1


def test_a_batch_counts_a_gz_file_by_its_text_and_one_whose_trailer_says_less_ends_the_batch_it_swells(tmp_path):
    from replication.ingest import batches

    def text(n: int, width: int) -> bytes:
        return b"".join(
            event("Account", "UPDATE", [f"001{i:015d}"], 1_763_800_000_000 + i, Name="x" * width).encode() + b"\n"
            for i in range(n)
        )

    honest = text(1200, 900)  # ~1.3 MB of text, compressing ~50x
    for n in (1, 2, 3):
        (tmp_path / f"{n}.jsonl.gz").write_bytes(gzip.compress(honest))
    # ~4 MB in two gzip members (as `cat a.gz b.gz` makes): the trailer gives the last member's length only.
    (tmp_path / "0.jsonl.gz").write_bytes(gzip.compress(text(2000, 1900)) + gzip.compress(text(1, 10)))
    zone = LandingZone(path=str(tmp_path))
    files = zone.list_files()
    assert all(f.size < 100_000 for f in files)  # by compressed bytes, one batch of 2 MiB holds them all
    assert len(batches(files, 2 << 20)) == 1

    assert [zone.text_size(f) for f in files] == [files[0].size, *[len(honest)] * 3]  # its last member's, floored
    cut = batches(files, 2 << 20, zone.text_size)
    assert [[f.path for f in b] for b in cut] == [["0.jsonl.gz", "1.jsonl.gz"], ["2.jsonl.gz"], ["3.jsonl.gz"]]
    # Read, its text reaches the batch's bound: the file after it is left to the next batch, unread.
    read = zone.read(cut[0], max_text=2 << 20)
    assert [f.path for f in read.unread] == ["1.jsonl.gz"]
    assert set(read.lines["source_file"].to_pylist()) == {"0.jsonl.gz"} and read.lines.num_rows == 2001
