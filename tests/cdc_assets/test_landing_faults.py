"""Landing faults (design §2, §9): unreadable files and huge lines are quarantined whole, the rest still applies."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from dagster._record import copy
from deltalake import DeltaTable

from cdc_assets.config import UpkeepConfig
from cdc_assets.upkeep.jobs import upkeep_table
from settings import TEST_SPARK_CONF
from event_lines import event
from harness import Platform
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import LINK, LandingZone

A1, A2, A3 = "001000000000001AAA", "001000000000002AAA", "001000000000003AAA"
T0 = 1_763_800_000_000


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    platform = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, max_line_bytes=4096)
    landing = LandingZone(path=str(platform.landing), max_line_bytes=4096, max_file_bytes=100_000)
    platform.defs = copy(platform.defs, resources={**platform.defs.resources, "landing": landing})
    return platform


def test_damage_costs_only_the_damaged_lines_asks_a_resync_and_sets_the_file_aside(platform):
    """A bad byte quarantines its line, a truncated gzip is read up to the cut, a file too large is quarantined
    whole; every file that lost content asks a resync of its objects (a GAP_OVERFLOW, as Salesforce's own), and
    upkeep moves it aside instead of deleting it."""
    good = [event("Account", "CREATE", [A1], T0, Name="Acme"),
            event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
            event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot")]
    platform.land(good[:1] + ["x" * 10_000] + good[1:], name="good.jsonl")
    gz = gzip.compress(("\n".join(good[:2]) + "\n" + good[2]).encode())
    (platform.landing / "truncated.jsonl.gz").write_bytes(gz[:-12])
    latin1 = '{"Name": "Caf\xe9"}\n'.encode("latin-1")
    (platform.landing / "latin1.jsonl").write_bytes(good[0].encode() + b"\n" + latin1)
    (platform.landing / "huge.jsonl").write_bytes(b"{}\n" * 100_000)  # over max_file_bytes below
    (platform.landing / "_inflight.jsonl").write_text(good[0] + "\n")  # not visible yet: never read
    platform.land([event("Account", "UPDATE", [A2], T0 + 3000, Rating="Warm")], name="clean.jsonl")
    # A Datastream file (its format is told by its lines) with a line naming no object: a resync of what it names.
    image = json.dumps({"read_method": "salesforce-cdc", "object": "Account", "uuid": "u-1",
                        "read_timestamp": "2025-11-22T08:00:01.000Z", "source_timestamp": "2025-11-22T08:00:00.000Z",
                        "source_metadata": {"object_name": "Account", "change_type": "INSERT", "is_deleted": False},
                        "payload": {"Id": A3, "Name": "Initech", "SystemModstamp": "2025-11-22T08:00:00.000Z"}})
    (platform.landing / "ds.jsonl").write_bytes(image.encode() + b"\n\xff\xfe\n")
    result = platform.run(close_after=0)

    reasons = {(q["source_file"], q["source_line"]): q["reason"] for q in platform.quarantine()}
    assert reasons[("good.jsonl", 2)] == "line longer than 4096 bytes"
    assert reasons[("truncated.jsonl.gz", 3)].startswith("gzip file ends at byte")
    assert reasons[("latin1.jsonl", 2)].startswith("line is not UTF-8 ('utf-8' codec can't decode byte 0xe9")
    assert reasons[("huge.jsonl", 0)].startswith("file is larger than max_file_bytes (100,000 bytes)")
    assert reasons[("ds.jsonl", 2)].startswith("line is not UTF-8")
    assert len(reasons) == 5
    ce = platform.materialization(result, "change_events")
    # Lines: 3 + 1 long (good), 2 + the cut one (truncated), 1 + 1 bad (latin1), 1 (clean), 1 + 1 bad (ds); the
    # huge file is a file.
    assert (ce["files"], ce["files_quarantined"], ce["lines_read"], ce["lines_quarantined"]) == (6, 1, 12, 4)
    rows = platform.rows("Account")
    assert rows[A1]["Rating"] == "Hot" and rows[A2]["Rating"] == "Warm" and rows[A3]["Name"] == "Initech"
    markers = [e for e in platform.change_events() if e["change_type"] == "GAP_OVERFLOW"]
    assert {(m["source_file"], m["source_line"], m["entity"]) for m in markers} == {
        (f"_damaged/{f}", 0, "Account") for f in ("good.jsonl", "truncated.jsonl.gz", "latin1.jsonl", "huge.jsonl",
                                                 "ds.jsonl")}
    assert platform.materialization(result, "Account")["resync_pending"].startswith("GAP_OVERFLOW at commit")

    again = platform.run(close_after=0)  # quarantined files are ingested (recorded), not retried forever
    assert platform.materialization(again, "change_events")["files"] == 0
    assert len(platform.quarantine()) == 5

    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    upkeep = UpkeepConfig.model_construct(**{**UpkeepConfig().model_dump(), "landing_after_ingest": "delete"})
    values = upkeep_table(warehouse, CHANGE_EVENTS, upkeep, replicated=["Account"], landing=landing)
    assert values["landing_files_retired"] == 6 and landing.list_files() == []
    kept = Path(landing.quarantined_path)
    assert sorted(p.name for p in kept.iterdir()) == ["ds.jsonl", "good.jsonl", "huge.jsonl", "latin1.jsonl",
                                                       "truncated.jsonl.gz"]
    assert (kept / "truncated.jsonl.gz").read_bytes() == gz[:-12]  # the evidence, as landed
    assert not Path(landing.archive_path).exists()  # clean.jsonl deleted, as asked


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


def test_symbolic_links_in_the_zone_are_never_followed_read_moved_or_deleted(platform, tmp_path):
    """Anyone who may write the zone may plant a link: to a file (its text would reach _quarantine) or to a folder
    (upkeep would move or delete what it holds). Neither is followed; both are reported."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = "SF_PASSWORD=hunter2-do-not-copy"
    (outside / "secret.jsonl").write_text(secret + "\n")
    (outside / "inner.jsonl").write_text(event("Account", "CREATE", [A2], T0, Name=secret) + "\n")
    (platform.landing / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (platform.landing / "folder").symlink_to(outside, target_is_directory=True)
    platform.land([event("Account", "CREATE", [A1], T0, Name="Acme")], name="real.jsonl")
    platform.run(close_after=0)

    landing, warehouse = LandingZone(path=str(platform.landing)), DeltaWarehouse(root=str(platform.warehouse))
    for mode in ("archive", "delete"):
        upkeep = UpkeepConfig.model_construct(**{**UpkeepConfig().model_dump(), "landing_after_ingest": mode})
        upkeep_table(warehouse, CHANGE_EVENTS, upkeep, replicated=["Account"], landing=landing)
    assert (outside / "secret.jsonl").read_text() == secret + "\n" and (outside / "inner.jsonl").exists()
    assert (platform.landing / "link.jsonl").is_symlink() and (platform.landing / "folder").is_symlink()
    assert [p.name for p in Path(landing.archive_path).rglob("*") if p.is_file()] == ["real.jsonl"]
    tables = [p.parent for p in platform.warehouse.rglob("_delta_log")]
    assert {t.name for t in tables} >= {"_change_events", "Account"}
    for table in tables:
        assert secret not in str(DeltaTable(str(table)).to_pyarrow_table().to_pylist())
    assert set(platform.rows("Account")) == {A1}
    assert landing.list_files() == []
    assert sorted((i.path, i.why) for i in landing.survey().ignored) == [("folder", LINK), ("link.jsonl", LINK)]
