"""Landing faults (docs/design/contract.md §2, §9): unreadable files and huge lines are quarantined whole, the rest
still applies; a file that breaks ingest on its own is quarantined whole and holds back no other, and an environment
that fails blames no file."""

from __future__ import annotations

import gzip
import json
import shutil

import dagster as dg
import pytest

from cdc_assets.ingest import pending_files
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
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


POISON = "poison-pill"  # the text that makes a line break ingest (cdc_assets/faults.py data_fault_point)
IDS = [f"001{n:012d}AAA" for n in range(1, 5)]


def land_four_with_one_poisoned(platform: Platform) -> None:
    """f0..f3.jsonl, one Account each; f1's line breaks ingest while CDC_FAULT_MARKER is set."""
    for n, record_id in enumerate(IDS):
        platform.land([event("Account", "CREATE", [record_id], T0 + n * 1000, Name=POISON if n == 1 else f"A{n}")],
                      name=f"f{n}.jsonl")


def test_a_file_that_breaks_ingest_is_quarantined_whole_and_holds_back_no_other(platform, monkeypatch):
    land_four_with_one_poisoned(platform)
    monkeypatch.setenv("CDC_FAULT_MARKER", POISON)
    result = platform.run(close_after=0, checks=True)

    assert result.success
    ce = platform.materialization(result, "change_events")
    assert (ce["files"], ce["files_failed"], ce["ingested"], ce["lines_quarantined"]) == (4, 1, 3, 0)
    assert ce["failed_files"] == ["f1.jsonl"]
    [row] = platform.quarantine()
    assert (row["source_file"], row["source_line"], row["raw"]) == ("f1.jsonl", 0, None)
    assert row["reason"].startswith("file failed to ingest on its own, twice (InjectedDataFault: fault injected at "
                                    "ingest.poisoned_line: a line holds the text 'poison-pill'")
    assert set(platform.rows("Account")) == {IDS[0], IDS[2], IDS[3]}
    check = {e.check_name: e for e in result.get_asset_check_evaluations()
             if e.asset_key == dg.AssetKey("change_events")}["no_failed_landing_files"]
    assert not check.passed and "f1.jsonl" in check.description and "land the file again" in check.description

    again = platform.run(close_after=0, checks=True)  # recorded as ingested: not retried forever
    assert platform.materialization(again, "change_events")["files"] == 0
    monkeypatch.delenv("CDC_FAULT_MARKER")  # the cause fixed, the file landed again under a new name
    shutil.copy(platform.landing / "f1.jsonl", platform.landing / "f1-again.jsonl")
    fixed = platform.run(close_after=0)
    assert platform.materialization(fixed, "change_events")["ingested"] == 1
    assert set(platform.rows("Account")) == set(IDS)


def test_a_file_is_not_blamed_when_the_environment_fails_with_it(platform, monkeypatch):
    """The poisoned file fails alone, but `_quarantine` cannot be loaded either (a store that fails): the run
    fails as before, nothing is quarantined, and the file stays pending until the store is back; then it is."""
    land_four_with_one_poisoned(platform)
    log = platform.warehouse / "_quarantine" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{not a delta log\n")
    monkeypatch.setenv("CDC_FAULT_MARKER", POISON)
    failed = platform.run(close_after=0, raise_on_error=False)

    assert not failed.success
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    # The first half went on (f0), then the run stopped at f1: the files after it wait for the next run.
    assert [f.path for f in pending_files(warehouse, landing)] == ["f1.jsonl", "f2.jsonl", "f3.jsonl"]
    assert [e["record_id"] for e in platform.change_events()] == [IDS[0]]
    shutil.rmtree(log.parent)  # the store is back
    assert platform.run(close_after=0).success
    assert [(q["source_file"], q["source_line"]) for q in platform.quarantine()] == [("f1.jsonl", 0)]
    assert pending_files(warehouse, landing) == []


def test_an_environment_failure_fails_the_run_and_blames_no_file(platform, monkeypatch):
    land_four_with_one_poisoned(platform)
    monkeypatch.setenv("CDC_FAULT_POINT", "ingest.after_parse")  # as a lost connection would: every batch fails
    assert not platform.run(close_after=0, raise_on_error=False).success
    assert platform.quarantine() == [] and platform.change_events() == []
    monkeypatch.delenv("CDC_FAULT_POINT")
    assert platform.run(close_after=0).success
    assert set(platform.rows("Account")) == set(IDS)


def test_hostile_headers_are_quarantined_and_the_rest_of_the_batch_still_applies(tmp_path, spark, sample_dir):
    """Each of these lines failed the whole batch (retried forever, every later file behind it), or made a row that
    is no record: commit times in microseconds or nanoseconds, a Datastream source_timestamp of 15 digits (an
    instant Python cannot hold, read back by dedup and the replica step), an entity name too long for a partition
    folder, an id ending in a line break. An event naming more records than a transaction can change becomes an
    overflow of its object (a resync), not 10,001 rows."""
    platform = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF)  # lines up to 8 MiB
    platform.land([event("Account", "CREATE", [A1], T0, Name="Acme")], name="first.jsonl")
    platform.run(close_after=0)  # change_events exists now: dedup reads the stored keys of a batch's time range
    phantom = "001000000000003\n"
    many = [f"001{i:012d}AAA" for i in range(10, 10_011)]
    platform.land([event("Account", "UPDATE", [A1], 1_700_000_000_000_000, Rating="Micro"),
                   event("Account", "UPDATE", [A1], 9_300_000_000_000_000, Rating="Nano"),
                   event("Account", "UPDATE", [A1], 1_700_000_000_000_000_000, Rating="Nano"),
                   event("X" * 300, "CREATE", [A2], T0 + 1000, Name="Long"),
                   event("Account", "GAP_UPDATE", [phantom], T0 + 2000),
                   event("Account", "UPDATE", many, T0 + 3000, Rating="Warm"),
                   event("Account", "UPDATE", [A1], T0 + 4000, Rating="Hot")], name="hostile.jsonl")
    platform.land([json.dumps({
        "stream_name": "s", "read_method": "salesforce-cdc", "object": "Account", "uuid": "u-1",
        "read_timestamp": "999999999999999", "source_timestamp": "999999999999999", "sort_keys": [999999999999999],
        "source_metadata": {"object_name": "Account", "change_type": "UPDATE", "is_deleted": False},
        "payload": {"Id": A2, "Name": "Far future"}})], name="datastream.jsonl")
    result = platform.run(close_after=0)

    reasons = {(q["source_file"], q["source_line"]): q["reason"] for q in platform.quarantine()}
    assert sorted(reasons) == [("datastream.jsonl", 1), *(("hostile.jsonl", n) for n in (1, 2, 3, 4, 5, 6))]
    assert all(reasons[("hostile.jsonl", n)].startswith("header commitTimestamp ") for n in (1, 2, 3))
    assert "is not a Salesforce object name" in reasons[("hostile.jsonl", 4)]
    assert reasons[("hostile.jsonl", 5)] == "header recordIds holds a value that is not a Salesforce id"
    assert reasons[("hostile.jsonl", 6)].startswith("header recordIds names 10001 records")
    assert reasons[("datastream.jsonl", 1)].startswith("Datastream event has no source_timestamp")
    rows = platform.rows("Account")
    assert rows[A1]["Rating"] == "Hot" and phantom not in rows and A2 not in rows
    assert platform.materialization(result, "Account")["resync_pending"].startswith("GAP_OVERFLOW at commit")
    stored = platform.change_events()
    assert {e["entity"] for e in stored} == {"Account"} and len(stored) == 3  # CREATE, the overflow, UPDATE
