"""Landing faults (docs/design/contract.md §2, §9): unreadable files and huge lines are quarantined whole, the rest
still applies; a file that breaks ingest on its own is quarantined whole and holds back no other, and an environment
that fails blames no file."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from dagster._record import copy
from deltalake import DeltaTable
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import check_no_failed_files
from cdc_assets.upkeep.jobs import upkeep_table
from object_schema.describe import ObjectSchema
from replication.config import UpkeepConfig
from replication.ingest import IngestRun, ingest, pending_files
from replication.quarantine import acknowledge_quarantine, newest_quarantined_at
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, read_table
from resources.landing_zone import LINK, LandingZone
from resources.storage import Folder
from salesforce_emulator.landing_lines import event

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
    good = [
        event("Account", "CREATE", [A1], T0, Name="Acme"),
        event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
        event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot"),
    ]
    platform.land([*good[:1], "x" * 10000, *good[1:]], name="good.jsonl")
    gz = gzip.compress(("\n".join(good[:2]) + "\n" + good[2]).encode())
    (platform.landing / "truncated.jsonl.gz").write_bytes(gz[:-12])
    latin1 = '{"Name": "Caf\xe9"}\n'.encode("latin-1")
    (platform.landing / "latin1.jsonl").write_bytes(good[0].encode() + b"\n" + latin1)
    (platform.landing / "huge.jsonl").write_bytes(b"{}\n" * 100_000)  # over max_file_bytes below
    (platform.landing / "_inflight.jsonl").write_text(good[0] + "\n")  # not visible yet: never read
    platform.land([event("Account", "UPDATE", [A2], T0 + 3000, Rating="Warm")], name="clean.jsonl")
    # A Datastream file (its format is told by its lines) with a line naming no object: a resync of what it names.
    image = json.dumps(
        {
            "read_method": "salesforce-cdc",
            "object": "Account",
            "uuid": "u-1",
            "read_timestamp": "2025-11-22T08:00:01.000Z",
            "source_timestamp": "2025-11-22T08:00:00.000Z",
            "source_metadata": {"object_name": "Account", "change_type": "INSERT", "is_deleted": False},
            "payload": {"Id": A3, "Name": "Initech", "SystemModstamp": "2025-11-22T08:00:00.000Z"},
        }
    )
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
        (f"_damaged/{f}", 0, "Account")
        for f in ("good.jsonl", "truncated.jsonl.gz", "latin1.jsonl", "huge.jsonl", "ds.jsonl")
    }
    assert platform.materialization(result, "Account")["resync_pending"].startswith("GAP_OVERFLOW at commit")

    again = platform.run(close_after=0)  # quarantined files are ingested (recorded), not retried forever
    assert platform.materialization(again, "change_events")["files"] == 0
    assert len(platform.quarantine()) == 5

    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    upkeep = UpkeepConfig.model_construct(**{**UpkeepConfig().model_dump(), "landing_after_ingest": "delete"})
    values = upkeep_table(warehouse, CHANGE_EVENTS, upkeep, replicated=["Account"], landing=landing)
    assert values["landing_files_retired"] == 6 and landing.list_files() == []
    kept = Path(landing.quarantined_path)
    assert sorted(p.name for p in kept.iterdir()) == [
        "ds.jsonl",
        "good.jsonl",
        "huge.jsonl",
        "latin1.jsonl",
        "truncated.jsonl.gz",
    ]
    assert (kept / "truncated.jsonl.gz").read_bytes() == gz[:-12]  # the evidence, as landed
    assert not Path(landing.archive_path).exists()  # clean.jsonl deleted, as asked


def test_blank_lines_are_read_and_counted_and_unicode_separators_stay_inside_their_line(platform):
    """A blank line is read but is no event: `lines_read = lines_quarantined + lines_blank + lines parsed`
    (README Counts). Raw U+2028 / U+0085 inside a JSON string (allowed there, and what a word processor pastes)
    does not end the line; LF, CRLF and CR do."""
    text = 'first line\u2028second line\x85third, "quoted" 😀\r\nafter a CRLF'
    a1 = json.loads(event("Account", "CREATE", [A1], T0, Name="Acme"))
    a1["data"]["payload"]["Description"] = text
    a2 = event("Account", "CREATE", [A2], T0 + 1000, Name="Globex")
    lines = [json.dumps(a1, ensure_ascii=False), "", "   \t", a2]
    (platform.landing / "blank.jsonl").write_bytes(
        ("\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n\n").encode()
    )
    result = platform.run(close_after=0)

    ce = platform.materialization(result, "change_events")
    assert (ce["lines_read"], ce["lines_blank"], ce["lines_quarantined"], ce["events_parsed"]) == (5, 3, 0, 2)
    assert ce["lines_read"] == ce["lines_quarantined"] + ce["lines_blank"] + ce["events_parsed"]
    assert platform.quarantine() == []
    assert platform.rows("Account")[A1]["Description"] == text
    assert [e["source_line"] for e in sorted(platform.change_events(), key=lambda e: e["source_line"])] == [1, 4]


POISON = "poison-pill"  # the text that makes a line break ingest (shared/faults.py data_fault_point)
IDS = [f"001{n:012d}AAA" for n in range(1, 5)]


def land_four_with_one_poisoned(platform: Platform) -> None:
    """f0..f3.jsonl, one Account each; f1's line breaks ingest while CDC_FAULT_MARKER is set."""
    for n, record_id in enumerate(IDS):
        platform.land(
            [event("Account", "CREATE", [record_id], T0 + n * 1000, Name=POISON if n == 1 else f"A{n}")],
            name=f"f{n}.jsonl",
        )


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
    assert row["reason"].startswith(
        "file failed to ingest on its own, twice (InjectedDataFault: fault injected at "
        "ingest.poisoned_line: a line holds the text 'poison-pill'"
    )
    assert set(platform.rows("Account")) == {IDS[0], IDS[2], IDS[3]}
    check = {
        e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("change_events")
    }["no_failed_landing_files"]
    assert not check.passed and "f1.jsonl" in check.description and "land the file again" in check.description

    again = platform.run(close_after=0, checks=True)  # recorded as ingested: not retried forever
    assert platform.materialization(again, "change_events")["files"] == 0
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    acknowledge_quarantine(warehouse, newest_quarantined_at(warehouse))  # reviewed: the check passes again
    assert check_no_failed_files(warehouse).passed
    monkeypatch.delenv("CDC_FAULT_MARKER")  # the cause fixed, the file landed again under a new name
    shutil.copy(platform.landing / "f1.jsonl", platform.landing / "f1-again.jsonl")
    fixed = platform.run(close_after=0)
    assert platform.materialization(fixed, "change_events")["ingested"] == 1
    assert set(platform.rows("Account")) == set(IDS)


def test_a_file_is_not_blamed_when_the_environment_fails_with_it(platform, monkeypatch):
    """The poisoned file fails alone, but `_quarantine` cannot be loaded either (a store that fails): the run
    fails, nothing is quarantined, and the file stays pending until the store is back; then it is."""
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
    platform.land(
        [
            event("Account", "UPDATE", [A1], 1_700_000_000_000_000, Rating="Micro"),
            event("Account", "UPDATE", [A1], 9_300_000_000_000_000, Rating="Nano"),
            event("Account", "UPDATE", [A1], 1_700_000_000_000_000_000, Rating="Nano"),
            event("X" * 300, "CREATE", [A2], T0 + 1000, Name="Long"),
            event("Account", "GAP_UPDATE", [phantom], T0 + 2000),
            event("Account", "UPDATE", many, T0 + 3000, Rating="Warm"),
            event("Account", "UPDATE", [A1], T0 + 4000, Rating="Hot"),
        ],
        name="hostile.jsonl",
    )
    platform.land(
        [
            json.dumps(
                {
                    "stream_name": "s",
                    "read_method": "salesforce-cdc",
                    "object": "Account",
                    "uuid": "u-1",
                    "read_timestamp": "999999999999999",
                    "source_timestamp": "999999999999999",
                    "sort_keys": [999999999999999],
                    "source_metadata": {"object_name": "Account", "change_type": "UPDATE", "is_deleted": False},
                    "payload": {"Id": A2, "Name": "Far future"},
                }
            )
        ],
        name="datastream.jsonl",
    )
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
        assert secret not in str(read_table(DeltaTable(str(table))).to_pylist())
    assert set(platform.rows("Account")) == {A1}
    assert landing.list_files() == []
    assert sorted((i.path, i.why) for i in landing.survey().ignored) == [("folder", LINK), ("link.jsonl", LINK)]


def test_a_batch_is_bounded_by_the_change_rows_its_lines_explode_into(tmp_path, spark, sample_dir):
    """Two events of 100 records and 1 KB of fields each, in one small file: the second passes the batch's bound on
    change rows (what the driver collects), so it is ingested as an overflow of Account (a resync) and quarantined
    with the reason, and the first is ingested as it is."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    warehouse, zone = DeltaWarehouse(root=str(tmp_path / "warehouse")), LandingZone(path=str(tmp_path / "landing"))
    ids = [f"001{i:012d}AAA" for i in range(1, 101)]
    lines = [event("Account", "UPDATE", ids, T0 + n, Description="d" * 1_000) for n in (0, 1000)]
    Folder(zone.path).write_atomically("wide.jsonl", "\n".join(lines) + "\n")
    result = ingest(IngestRun(spark, warehouse, zone, {"Account": schema}, run_id="r", max_change_bytes=200_000))
    rows = read_table(warehouse.table(CHANGE_EVENTS)).to_pylist()
    assert sorted({(r["source_line"], r["change_type"]) for r in rows}) == [(1, "UPDATE"), (2, "GAP_OVERFLOW")]
    assert len(rows) == 101 and result.counts["lines_quarantined"] == 1
    [entry] = read_table(warehouse.table(QUARANTINE)).to_pylist()
    assert entry["source_line"] == 2 and entry["reason"].startswith("the batch's change rows pass 200000 bytes")
