"""Fault knobs: gap events, overflow, duplicate and late files; file visibility and rolling."""

from __future__ import annotations

import time

from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.ids import DUMMY_ID
from salesforce_emulator.testing import body, header, read_landed_events


def _emulator(tmp_path, **kwargs) -> Emulator:
    return Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", roll_seconds=3600, **kwargs)


def test_gap_fraction_replaces_change_events_with_header_only_gaps(tmp_path, landed_events):
    with _emulator(tmp_path, faults=FaultConfig(gap_fraction=1.0)) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A"})
        with emu.store.transaction() as txn:
            txn.update("Account", account, {"Rating": "Hot"})
            txn.delete("Account", [account])
        events = landed_events(emu)
    assert [header(e)["changeType"] for e in events] == ["GAP_CREATE", "GAP_UPDATE", "GAP_DELETE"]
    assert all(body(e) == {} and header(e)["recordIds"] == [account] for e in events)
    assert all(header(e)["changedFields"] == [] for e in events)


def test_events_over_a_size_become_gap_events(tmp_path, landed_events):
    with _emulator(tmp_path, faults=FaultConfig(gap_over_bytes=2_000)) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A"})
        with emu.store.transaction() as txn:
            txn.update("Account", account, {"Description": "x" * 5_000})
        with emu.store.transaction() as txn:
            txn.update("Account", account, {"Rating": "Hot"})
        events = landed_events(emu)
    assert [header(e)["changeType"] for e in events] == ["CREATE", "GAP_UPDATE", "UPDATE"]


def test_a_transaction_over_the_threshold_overflows_once_per_entity(tmp_path, landed_events):
    with _emulator(tmp_path, faults=FaultConfig(overflow_threshold=5)) as emu:
        with emu.store.transaction() as txn:
            for n in range(8):
                txn.create("Account", {"Name": f"A{n}"})
            txn.create("Contact", {"LastName": "C"})
            txn.create("Account", {"Name": "A8"})
        with emu.store.transaction() as txn:
            txn.create("Account", {"Name": "after"})
        events = landed_events(emu)
    kinds = [(header(e)["entityName"], header(e)["changeType"]) for e in events]
    assert kinds == [("Account", "CREATE")] * 5 + [
        ("Account", "GAP_OVERFLOW"),
        ("Contact", "GAP_OVERFLOW"),
        ("Account", "CREATE"),
    ]
    overflow = events[5]
    assert header(overflow)["recordIds"] == [DUMMY_ID] and body(overflow) == {}
    assert header(overflow)["sequenceNumber"] == 6 and header(events[6])["sequenceNumber"] == 9


def test_duplicate_files_repeat_the_same_events(tmp_path):
    with _emulator(tmp_path, faults=FaultConfig(duplicate_file_fraction=1.0)) as emu:
        with emu.store.transaction() as txn:
            txn.create("Account", {"Name": "A"})
        files = emu.flush_cdc()
    assert len(files) == 2 and files[1].name.endswith("-dup.jsonl")
    assert files[0].read_bytes() == files[1].read_bytes()


def test_late_files_are_published_after_newer_files(tmp_path):
    faults = FaultConfig(late_file_fraction=0.5, late_after_files=2, seed=7)
    with _emulator(tmp_path, faults=faults) as emu:
        for n in range(12):
            with emu.store.transaction() as txn:
                txn.create("Account", {"Name": f"A{n}"})
            emu.flush_cdc(include_late=False)
        held_back = list((tmp_path / "landing").rglob("_*.jsonl"))
        published = emu.flush_cdc()
        events = read_landed_events(tmp_path / "landing")
    assert held_back, "some files were held back"
    assert published != sorted(published), "late files become visible after newer ones"
    assert sorted(header(e)["commitTimestamp"] for e in events) == [header(e)["commitTimestamp"] for e in events]
    assert len(events) == 12


def test_files_stay_invisible_until_rolled_by_size_or_age(tmp_path):
    with _emulator(tmp_path, roll_bytes=3_000) as emu:
        with emu.store.transaction() as txn:
            txn.create("Account", {"Name": "small"})
        landing = tmp_path / "landing"
        assert read_landed_events(landing) == [] and list(landing.rglob("_*.jsonl"))
        with emu.store.transaction() as txn:
            for n in range(20):
                txn.create("Account", {"Name": f"big {n}"})
        files = list(landing.rglob("[0-9]*.jsonl"))
        assert len(files) == 1 and len(files[0].read_text().splitlines()) == 21
        assert files[0].relative_to(landing).parts[0].isdigit() and len(files[0].relative_to(landing).parts) == 5
    with Emulator(tmp_path / "org2", landing_dir=tmp_path / "aged", roll_seconds=0.3) as emu:
        with emu.store.transaction() as txn:
            txn.create("Account", {"Name": "aged"})
        deadline = time.monotonic() + 30
        while not read_landed_events(tmp_path / "aged") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(read_landed_events(tmp_path / "aged")) == 1


def test_set_faults_changes_knobs_at_run_time(tmp_path, landed_events):
    with _emulator(tmp_path) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A"})
        emu.set_faults(gap_fraction=1.0)
        with emu.store.transaction() as txn:
            txn.update("Account", account, {"Rating": "Hot"})
        emu.set_faults(FaultConfig())
        with emu.store.transaction() as txn:
            txn.update("Account", account, {"Rating": "Cold"})
        kinds = [header(e)["changeType"] for e in landed_events(emu)]
    assert kinds == ["CREATE", "GAP_UPDATE", "UPDATE"]
