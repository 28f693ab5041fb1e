"""Exactly-once and ordering guarantees of the replication core, through Dagster's real materialize()."""

from __future__ import annotations

import gzip
import json

import pytest
from harness import Platform, comparable, load_lines
from settings import TEST_SPARK_CONF

from salesforce_emulator.landing_lines import event
from shared.commit_time import latest_commit_ms

OBJECTS = ["Account", "Contact", "Opportunity"]


@pytest.fixture
def make_platform(tmp_path, spark, sample_dir):
    def make(name: str = "p", **options) -> Platform:
        return Platform(tmp_path / name, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF, **options)

    return make


@pytest.fixture
def sample_lines(sample_dir) -> list[str]:
    return load_lines(sample_dir / "events.jsonl")


def state(platform: Platform) -> dict:
    return {o: comparable(platform.rows(o)) for o in OBJECTS}


def test_same_events_landed_twice_give_same_tables(make_platform, sample_lines):
    once, twice = make_platform("once"), make_platform("twice")
    once.land(sample_lines)
    once.run()
    twice.land(sample_lines, name="a.jsonl")
    twice.land(sample_lines, name="b.jsonl")
    result = twice.run()
    assert state(twice) == state(once)
    ce = twice.materialization(result, "change_events")
    # Each file holds 16 change rows (15 good lines, one naming two records); 15 are distinct events.
    assert ce["events_parsed"] == 32 and ce["duplicates"] == 17 and ce["ingested"] == 15


def test_a_backlog_ingested_one_file_per_commit_gives_the_same_tables(make_platform, sample_lines):
    whole, sliced = make_platform("whole"), make_platform("sliced", max_ingest_batch_bytes=1)
    for p in (whole, sliced):
        for i in range(0, len(sample_lines), 4):  # 4 files, then all lines again: every event twice
            p.land(sample_lines[i : i + 4], name=f"a{i:02d}.jsonl")
        p.land(sample_lines, name="b.jsonl")
    results = [whole.run(), sliced.run()]
    assert state(sliced) == state(whole)
    meta = [p.materialization(r, "change_events") for p, r in zip((whole, sliced), results)]
    counts = [
        {
            k: m[k]
            for k in ("files", "lines_read", "lines_quarantined", "events_parsed", "duplicates", "ingested", "ignored")
        }
        for m in meta
    ]
    assert counts[1] == counts[0] and counts[1]["duplicates"] == 17 and counts[1]["files"] == 5
    # one commit per file (each is over the 1-byte limit), each with the next ingest sequence number
    assert meta[1]["ingest_seq"] == 5 and meta[0]["ingest_seq"] == 1


def test_a_gz_backlog_is_cut_by_its_text_and_a_file_of_several_members_ends_its_batch(make_platform):
    """A batch is bounded by text, a `.gz` counted by the length its trailer gives; a file of two gzip members says
    only its last member's, and reading it ends the batch: the file after it is ingested in the next commit."""

    def lines(first: int, n: int) -> bytes:
        return "".join(
            event("Account", "CREATE", [f"001{i:012d}AAA"], 1_763_800_000_000 + i, tx=f"t{i}", replay=i, Name="x" * 500)
            + "\n"
            for i in range(first, first + n)
        ).encode()

    whole, cut = make_platform("whole"), make_platform("cut", max_ingest_batch_bytes=100_000)
    for p in (whole, cut):
        (p.landing / "a.jsonl.gz").write_bytes(gzip.compress(lines(0, 300)) + gzip.compress(lines(300, 1)))
        (p.landing / "b.jsonl.gz").write_bytes(gzip.compress(lines(301, 20)))
    assert len(lines(0, 300)) > 100_000  # a.jsonl.gz holds more than a batch, and says less
    results = [whole.run(close_after=0), cut.run(close_after=0)]
    assert state(cut) == state(whole) and len(cut.rows("Account")) == 321
    meta = [p.materialization(r, "change_events") for p, r in zip((whole, cut), results)]
    assert (meta[0]["ingest_seq"], meta[1]["ingest_seq"]) == (1, 2)  # one commit, or a.jsonl.gz's then b.jsonl.gz's


def test_split_files_landed_in_reverse_order_give_same_tables(make_platform, sample_lines):
    once, split = make_platform("once"), make_platform("split")
    once.land(sample_lines)
    once.run()
    split.land(sample_lines[8:], name="2025/01/01/00/0001.jsonl")  # later events, earlier name
    split.land(sample_lines[:8], name="2025/01/01/00/0002.jsonl")
    split.run()
    assert state(split) == state(once)


def test_held_transaction_is_applied_after_a_newer_transaction_lands(make_platform, sample_lines):
    platform = make_platform()
    platform.land(sample_lines)
    platform.run()
    assert platform.rows("Account")["001000000000002AAA"]["Description"] is None

    newer = json.loads(sample_lines[-1])
    header = newer["data"]["payload"]["ChangeEventHeader"]
    header.update(
        transactionKey="later-tx",
        commitTimestamp=header["commitTimestamp"] + 60_000,
        commitNumber=header["commitNumber"] + 10,
        recordIds=["001000000000001AAA"],
    )
    newer["data"]["payload"]["Description"] = "newer"
    newer["data"]["event"]["replayId"] += 7
    platform.land([json.dumps(newer)])
    result = platform.run()

    rows = platform.rows("Account")
    assert rows["001000000000002AAA"]["Description"] == "pending"  # the held transaction, now closed
    assert rows["001000000000001AAA"]["Description"] is None  # the newest transaction is held in turn
    account = platform.materialization(result, "Account")
    assert account["applied"] == 1 and account["held"] == 1
    assert account["held_transactions"] == ["later-tx"]


def test_open_transaction_closes_after_timeout(make_platform, sample_lines):
    platform = make_platform()
    platform.land(sample_lines)
    platform.run()
    platform.run(close_after=0)
    assert platform.rows("Account")["001000000000002AAA"]["Description"] == "pending"


def test_rerun_without_new_files_changes_nothing(make_platform, sample_lines):
    platform = make_platform()
    platform.land(sample_lines)
    platform.run()
    before = state(platform)
    versions = {o: platform.table_version(o) for o in ("Account", "Contact")}
    result = platform.run()
    assert state(platform) == before
    assert {o: platform.table_version(o) for o in ("Account", "Contact")} == versions
    assert platform.materialization(result, "change_events")["files"] == 0


def test_late_event_marks_record_dirty_instead_of_applying_out_of_order(make_platform, sample_lines):
    platform = make_platform()
    # Everything but the Industry update (lines 3-4) first, then those lines arrive late.
    platform.land(sample_lines[:2] + sample_lines[4:])
    platform.run()
    assert platform.rows("Account")["001000000000001AAA"]["Industry"] == "Manufacturing"
    platform.land(sample_lines[2:4])
    result = platform.run()
    row = platform.rows("Account")["001000000000001AAA"]
    assert row["Industry"] == "Manufacturing"  # never applied out of order
    assert row["_sf_dirty_since"] is not None  # but not dropped: the record awaits reconciliation
    assert platform.materialization(result, "Account")["late"] == 1


def test_update_for_unknown_record_makes_it_dirty(make_platform, sample_lines):
    platform = make_platform()
    platform.land([sample_lines[2], sample_lines[-1]])  # an UPDATE of an Account never created
    platform.run()
    row = platform.rows("Account")["001000000000001AAA"]
    assert row["Industry"] == "Energy" and row["_sf_dirty_since"] is not None


def test_a_commit_time_more_than_a_day_ahead_is_quarantined_at_the_bound_the_subscriber_applies(make_platform):
    """A forged or mis-clocked commit time would win over every real change of its record until then; ingest
    refuses it as the subscriber does (shared/commit_time.py)."""
    platform = make_platform()
    latest = latest_commit_ms()
    account = "001000000000001AAA"
    platform.land(
        [
            event("Account", "CREATE", [account], latest - 86_400_000 - 60_000, Name="Acme"),
            event("Account", "UPDATE", [account], latest + 60_000, Name="Forged"),  # a minute past the bound
            event("Account", "UPDATE", [account], 32_503_680_000_000, Name="Year 3000"),
        ]
    )
    assert platform.run(close_after=0).success
    assert platform.rows("Account")[account]["Name"] == "Acme"
    reasons = {r["source_line"]: r["reason"] for r in platform.quarantine()}
    assert set(reasons) == {2, 3} and all("no later than a day after" in r for r in reasons.values())
