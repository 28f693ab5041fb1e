"""Landing faults (docs/design/contract.md §2, §9): unreadable files and huge lines are quarantined whole, the rest
still applies."""

from __future__ import annotations

import gzip
import json

import pytest

from settings import TEST_SPARK_CONF
from event_lines import event
from harness import Platform

A1, A2 = "001000000000001AAA", "001000000000002AAA"
T0 = 1_763_800_000_000


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, max_line_bytes=4096)


def test_bad_files_and_lines_are_quarantined_and_good_ones_applied(platform):
    good = [event("Account", "CREATE", [A1], T0, Name="Acme"),
            event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
            event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot")]
    platform.land(good[:1] + ["x" * 10_000] + good[1:], name="good.jsonl")
    (platform.landing / "truncated.jsonl.gz").write_bytes(gzip.compress(good[0].encode())[:-12])
    (platform.landing / "latin1.jsonl").write_bytes("{\"Name\": \"Caf\xe9\"}\n".encode("latin-1"))
    (platform.landing / "_inflight.jsonl").write_text(good[0] + "\n")  # not visible yet: never read
    result = platform.run(close_after=0)

    reasons = {(q["source_file"], q["source_line"]): q["reason"] for q in platform.quarantine()}
    assert reasons[("good.jsonl", 2)] == "line longer than 4096 bytes"
    assert reasons[("truncated.jsonl.gz", 0)].startswith("file unreadable (EOFError")
    assert reasons[("latin1.jsonl", 0)].startswith("file unreadable (UnicodeDecodeError")
    assert len(reasons) == 3
    ce = platform.materialization(result, "change_events")
    assert (ce["files"], ce["files_quarantined"], ce["lines_quarantined"]) == (3, 2, 1)
    rows = platform.rows("Account")
    assert rows[A1]["Rating"] == "Hot" and rows[A2]["Name"] == "Globex"

    again = platform.run(close_after=0)  # quarantined files are ingested (recorded), not retried forever
    assert platform.materialization(again, "change_events")["files"] == 0
    assert len(platform.quarantine()) == 3


def test_blank_lines_are_read_and_counted_and_unicode_separators_stay_inside_their_line(platform):
    """A blank line is read but is no event: `lines_read = lines_quarantined + lines_blank + lines parsed`
    (README Counts). Raw U+2028 / U+0085 inside a JSON string (allowed there, and what a word processor pastes)
    does not end the line; LF, CRLF and CR do."""
    text = "first line\u2028second line\x85third, \"quoted\" 😀\r\nafter a CRLF"
    a1 = json.loads(event("Account", "CREATE", [A1], T0, Name="Acme"))
    a1["data"]["payload"]["Description"] = text
    a2 = event("Account", "CREATE", [A2], T0 + 1000, Name="Globex")
    lines = [json.dumps(a1, ensure_ascii=False), "", "   \t", a2]
    (platform.landing / "blank.jsonl").write_bytes(("\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n\n")
                                                   .encode())
    result = platform.run(close_after=0)

    ce = platform.materialization(result, "change_events")
    assert (ce["lines_read"], ce["lines_blank"], ce["lines_quarantined"], ce["events_parsed"]) == (5, 3, 0, 2)
    assert ce["lines_read"] == ce["lines_quarantined"] + ce["lines_blank"] + ce["events_parsed"]
    assert platform.quarantine() == []
    assert platform.rows("Account")[A1]["Description"] == text
    assert [e["source_line"] for e in sorted(platform.change_events(), key=lambda e: e["source_line"])] == [1, 4]
