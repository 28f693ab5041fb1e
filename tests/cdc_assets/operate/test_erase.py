"""The erasure job end to end (cdc_assets/operate/erase.py): the golden sample materialized with history and a
changefeed, its landing files archived by upkeep, one Contact erased through the job the UI launches; the record
is then in no version of any table, no data file (Change Data Feed included), no feed file and no archived line,
every other record is as it was, and the platform runs on without bringing it back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from harness import Platform, load_lines
from settings import TEST_SPARK_CONF

from cdc_assets.operate.erase import ERASE_JOB, erase_keys
from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, read_table
from resources.landing_zone import LandingZone
from salesforce_emulator.landing_lines import event

ERASED, KEPT = "003000000000001AAA", "003000000000002AAA"
ERASED_VALUES = ["003000000000001", "ada@acme.example", "ada.l@acme.example", "Lovelace"]  # its Id and values
TABLES = ["Contact", "Contact__history", CHANGE_EVENTS, QUARANTINE]
T1 = 1_763_900_000_000


def every_version_rows(path: Path) -> list[list[dict]]:
    """The rows of each version of the table that can still be read (a vacuumed version cannot)."""
    found = []
    for version in range(DeltaTable(str(path)).version() + 1):
        try:
            found.append(read_table(DeltaTable(str(path), version=version)).to_pylist())
        except Exception:  # noqa: BLE001 - its files are vacuumed: that version is unreadable, which is the point
            continue
    return found


def data_file_text(path: Path) -> str:
    """Every value of every data file in the table's folder, live or not, the Change Data Feed's included."""
    values = []
    for file in (f for f in path.rglob("*.parquet") if "_delta_log" not in f.parts):
        values += [str(v) for column in pq.read_table(file).columns for v in column.to_pylist() if v is not None]
    return "\n".join(values)


def text_below(folder: Path) -> str:
    return "\n".join(
        (gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes()).decode()
        for f in folder.rglob("*")
        if f.is_file()
    )


def other_rows(platform: Platform, name: str) -> list[dict]:
    drop = {"_sf_synced_at"}
    return sorted(
        (
            {k: v for k, v in r.items() if k not in drop}
            for r in platform.table(name)
            if "003000000000001" not in json.dumps(r, default=str)
        ),
        key=lambda r: json.dumps(r, default=str),
    )


@pytest.fixture
def platform(tmp_path, spark, sample_dir) -> Platform:
    feed = tmp_path / "feed"
    p = Platform(
        tmp_path,
        sample_dir / "describe",
        ["Account", "Contact"],
        TEST_SPARK_CONF,
        close_after=0,
        history=True,
        changefeed={"uri": str(feed), "initial_scan": True},
    )
    p.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    p.land(
        [
            event("Contact", "CREATE", [KEPT], T1, tx="k", LastName="Hopper", Email="grace@navy.example"),
            event("Contact", "UPDATE", [ERASED], T1 + 1000, tx="e", Birthdate="not a date"),
        ],
        name="more.jsonl",
    )
    assert p.run(close_after=0).success
    warehouse, landing = DeltaWarehouse(root=str(p.warehouse)), LandingZone(path=str(p.landing))
    upkeep_table(warehouse, CHANGE_EVENTS, UpkeepConfig(), replicated=p.objects, landing=landing)  # archived
    return p


def erase_config(name: str, ids: list[str]) -> dict:
    return {"ops": {f"{ERASE_JOB}_events": {"config": {"object": name, "ids": ids}}}}


def test_erasure_purges_a_record_everywhere_and_leaves_every_other_as_it_was(platform, tmp_path):
    landing = LandingZone(path=str(platform.landing))
    archive, set_aside = Path(landing.archive_path), Path(landing.quarantined_path)
    # The record is everywhere before; its landing files had quarantined lines, so upkeep set them aside.
    assert all(v in text_below(archive) + text_below(set_aside) for v in ERASED_VALUES)
    assert any(ERASED in json.dumps(q, default=str) for q in platform.quarantine())
    assert "Lovelace" in text_below(tmp_path / "feed")
    before = {name: other_rows(platform, name) for name in ["Account", *TABLES]}
    archived_lines = (text_below(archive) + text_below(set_aside)).count("\n")

    job = platform.defs.resolve_job_def(ERASE_JOB)
    result = job.execute_in_process(instance=platform.instance, run_config=erase_config("Contact", [ERASED]))
    assert result.success

    for name in TABLES:
        path = platform.warehouse / name
        versions = every_version_rows(path)
        assert versions, name  # the latest version at least reads
        assert not [r for rows in versions for r in rows if "003000000000001" in json.dumps(r, default=str)], name
        text = data_file_text(path)
        assert not [v for v in ERASED_VALUES if v in text], name
    for folder in (archive, set_aside, tmp_path / "feed"):
        assert not [v for v in ERASED_VALUES if v in text_below(folder)], folder
    assert "grace@navy.example" in text_below(tmp_path / "feed") and "Hopper" in text_below(set_aside)
    # Its 4 sample events and the bad update.
    assert (text_below(archive) + text_below(set_aside)).count("\n") == archived_lines - 5

    assert {name: other_rows(platform, name) for name in ["Account", *TABLES]} == before
    assert KEPT in {r["Id"] for r in platform.table("Contact")}

    platform.land([event("Account", "UPDATE", ["001000000000001AAA"], T1 + 5000, tx="later", Name="Later")])
    assert platform.run(close_after=0).success  # the replica, its history and its feed go on from there
    assert ERASED not in {r["Id"] for r in platform.table("Contact")}
    assert platform.rows("Account")["001000000000001AAA"]["Name"] == "Later"
    assert not [v for v in ERASED_VALUES if v in text_below(tmp_path / "feed")]


def test_erasure_refuses_what_is_not_a_record_id_and_fails_while_a_landing_file_still_names_it(platform):
    job = platform.defs.resolve_job_def(ERASE_JOB)
    bad = job.execute_in_process(
        instance=platform.instance,
        raise_on_error=False,
        run_config=erase_config("Contact", ["003' OR true --"]),
    )
    assert not bad.success and len(platform.table("Contact")) == 2  # nothing was touched
    assert erase_keys([ERASED, ERASED[:15]]) == [ERASED[:15]]
    stranger = job.execute_in_process(
        instance=platform.instance, raise_on_error=False, run_config=erase_config("Contacts", [ERASED])
    )
    failure = next(e for e in stranger.all_events if e.is_step_failure).step_failure_data.error.message
    assert "Contacts" in failure and "Account, Contact" in failure and len(platform.table("Contact")) == 2

    platform.land(
        [event("Contact", "UPDATE", [ERASED], T1 + 9000, tx="late", LastName="Again")], name="pending.jsonl"
    )  # landed, not ingested yet
    run = job.execute_in_process(
        instance=platform.instance,
        raise_on_error=False,
        run_config=erase_config("Contact", [ERASED]),
    )
    failure = [e for e in run.all_events if e.is_step_failure]
    assert not run.success and failure and "pending.jsonl" in failure[0].event_specific_data.error.message
    assert ERASED not in {r["Id"] for r in platform.table("Contact")}  # the rest was done
