"""Retiring ingested landing files (replication/upkeep/landing.py): upkeep moves what change_events has ingested
out of the landing zone and lets change_events forget it after the ledger horizon, and the tables stay exact: a
retired file landed again is skipped while remembered and is all duplicates once forgotten."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig
from replication.ingest import file_app_id, pending_files
from resources.delta import CHANGE_EVENTS, TXN_RETENTION, DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.storage import Folder
from salesforce_emulator.landing_lines import event

T0 = 1_763_800_000_000
IDS = [f"001{n:012d}AAA" for n in range(1, 4)]


@pytest.fixture
def platform(tmp_path, spark, sample_dir) -> Platform:
    p = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0)
    for n, rid in enumerate(IDS):
        p.land([event("Account", "CREATE", [rid], T0 + n * 1000, tx=f"c{n}", Name=f"A{n}")])
        p.run()
    return p


def settings(**changes) -> UpkeepConfig:
    return UpkeepConfig.model_construct(**{**UpkeepConfig().model_dump(), **changes})


def visible(landing: LandingZone) -> list[str]:
    return [f.path for f in landing.list_files()]


def test_upkeep_retires_ingested_files_only_and_sets_the_ledger_horizon(platform):
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    ingested = visible(landing)
    ledger = [file_app_id(f) for f in landing.list_files()]
    platform.land([event("Account", "UPDATE", [IDS[0]], T0 + 9000, tx="u", Name="later")], name="waiting.jsonl")

    values = upkeep_table(warehouse, CHANGE_EVENTS, UpkeepConfig(), replicated=["Account"], landing=landing)

    assert values["landing_files_retired"] == len(ingested) == len(IDS)
    assert values["landing_files_pending"] == 1
    assert visible(landing) == ["waiting.jsonl"]  # not ingested yet: left for the next run
    archived = sorted(p.name for p in Path(landing.archive_path).rglob("*.jsonl"))
    assert archived == sorted(ingested)
    table = warehouse.table(CHANGE_EVENTS)
    assert table.metadata().configuration[TXN_RETENTION] == f"interval {168 * 3600} seconds"
    assert all(table.transaction_version(key) == 1 for key in ledger)  # still remembered
    platform.run()
    assert platform.rows("Account")[IDS[0]]["Name"] == "later"


def test_a_retired_file_landed_again_is_skipped_then_all_duplicates_once_forgotten(platform):
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    first = visible(landing)[0]
    first_key = file_app_id(landing.list_files()[0])
    upkeep_table(warehouse, CHANGE_EVENTS, UpkeepConfig(), replicated=["Account"], landing=landing)
    before = platform.rows("Account")

    shutil.copy2(Path(landing.archive_path) / first, platform.landing / first)  # the same file again (same mtime)
    assert pending_files(warehouse, landing) == []  # remembered: skipped unread
    # A 2 s ledger: the file's app transaction, stamped when it was ingested, is older than that.
    time.sleep(2.1)
    values = upkeep_table(
        warehouse, CHANGE_EVENTS, settings(landing_ledger_hours=2 / 3600), replicated=["Account"], landing=landing
    )
    assert values["landing_files_retired"] == 0 and values["landing_files_pending"] == 1
    table = warehouse.table(CHANGE_EVENTS)
    known = warehouse.app_transactions(table)
    assert file_app_id(landing.list_files()[0]) == first_key not in known
    assert DeltaTable(table.table_uri).transaction_version(first_key) is None  # delta-rs agrees
    assert "change_events" in known  # the ingest position never expires

    result = platform.run()
    counts = platform.materialization(result, "change_events")
    assert counts["files"] == 1 and counts["duplicates"] == counts["events_parsed"] == 1
    assert platform.rows("Account") == before


def test_keep_leaves_the_landing_zone_as_it_is(platform):
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    files = visible(landing)
    values = upkeep_table(
        warehouse, CHANGE_EVENTS, settings(landing_after_ingest="keep"), replicated=["Account"], landing=landing
    )
    assert values["landing_files_retired"] == 0 and visible(landing) == files
    assert TXN_RETENTION not in warehouse.table(CHANGE_EVENTS).metadata().configuration


def land_and_retire(landing: LandingZone, name: str, texts: list[str], **retire) -> None:
    """Land `name` with each text in turn (a writer reusing a retired name) and retire it each time."""
    for text in texts:
        Folder(landing.path).write_atomically(name, text)
        assert landing.retire([f for f in landing.list_files() if f.path == name], **retire) == 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_archive_never_replaces_a_file_it_holds(tmp_path, request, where):
    """A name landed again after its file was retired: both copies are kept, the later under `<stem>-<n>`."""
    root = str(tmp_path / "landing") if where == "local" else f"s3://{request.getfixturevalue('s3').new_bucket()}/zone"
    landing = LandingZone(path=root)
    land_and_retire(landing, "2026/01/a.jsonl", ["first\n", "second\n", "third\n"])
    land_and_retire(landing, "b.jsonl.gz", ["gz one", "gz two"])
    archive = Folder(landing.archive_path)
    assert {name: archive.read_text(name) for name, _ in archive.walk()} == {
        "2026/01/a.jsonl": "first\n",
        "2026/01/a-1.jsonl": "second\n",
        "2026/01/a-2.jsonl": "third\n",
        "b.jsonl.gz": "gz one",
        "b-1.jsonl.gz": "gz two",
    }
    land_and_retire(landing, "c.jsonl", ["set aside\n", "again\n"], to=landing.quarantined_path)
    aside = Folder(landing.quarantined_path)
    assert {name: aside.read_text(name) for name, _ in aside.walk()} == {
        "c.jsonl": "set aside\n",
        "c-1.jsonl": "again\n",
    }
    assert landing.list_files() == []


def test_a_move_that_died_between_its_link_and_its_unlink_is_finished_not_copied_again(tmp_path):
    landing = LandingZone(path=str(tmp_path / "landing"))
    Folder(landing.path).write_atomically("a.jsonl", "once\n")
    Path(landing.archive_path).mkdir()
    os.link(tmp_path / "landing" / "a.jsonl", Path(landing.archive_path) / "a.jsonl")  # the archive's first step
    assert landing.retire(landing.list_files()) == 1
    assert sorted(p.name for p in Path(landing.archive_path).iterdir()) == ["a.jsonl"] and not landing.list_files()
