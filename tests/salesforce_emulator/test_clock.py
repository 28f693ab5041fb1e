"""The org's clock as a real org keeps it: transactions share milliseconds, late commits appear behind newer rows,
and a record's own SystemModstamp never moves back (store.py explains why, from Salesforce's docs)."""

from __future__ import annotations

import time

from salesforce_emulator import Emulator
from salesforce_emulator.testing import event_order, header
from salesforce_emulator.values import iso_to_ms


def _stamp(emu: Emulator, name: str, record_id: str) -> int:
    return iso_to_ms(emu.store.get_row(name, record_id)["SystemModstamp"])


def _update(emu: Emulator, name: str, record_id: str, **values) -> None:
    with emu.store.transaction() as txn:
        txn.update(name, record_id, values)


def test_transactions_in_one_millisecond_share_a_timestamp_and_commit_numbers_order_them(emulator, landed_events):
    for n in range(300):  # one transaction each, as fast as they go: a bulk load's pace
        with emulator.store.transaction() as txn:
            txn.create("Account", {"Name": f"A{n}"})
    events = landed_events(emulator)
    stamps = [header(e)["commitTimestamp"] for e in events]
    assert len(set(stamps)) < len(stamps), "no two transactions shared a millisecond"
    numbers = [header(e)["commitNumber"] for e in events]
    assert numbers == sorted(set(numbers))
    assert [event_order(e) for e in events] == sorted(event_order(e) for e in events)


def test_one_record_changed_within_one_millisecond_gets_increasing_stamps(emulator, landed_events):
    with emulator.store.transaction() as txn:
        record_id = txn.create("Account", {"Name": "A"})
    emulator.same_timestamp_commits(3)
    for n in range(3):
        _update(emulator, "Account", record_id, NumberOfEmployees=n)
    stamps = [header(e)["commitTimestamp"] for e in landed_events(emulator)]
    assert stamps == sorted(set(stamps)) and _stamp(emulator, "Account", record_id) == stamps[-1]


def test_a_late_commit_lands_behind_newer_rows_but_never_moves_a_record_back(emulator, landed_events):
    with emulator.store.transaction() as txn:
        old, new = txn.create("Account", {"Name": "old"}), txn.create("Account", {"Name": "new"})
    time.sleep(0.2)
    _update(emulator, "Account", new, Name="new, changed")
    newest = _stamp(emulator, "Account", new)
    emulator.late_commits(2, 40)
    _update(emulator, "Account", old, Name="late, other record")  # behind rows already visible: allowed
    _update(emulator, "Account", new, Name="late, same record")  # would move `new` back: stamped after it
    late_other, late_same = landed_events(emulator)[-2:]
    assert header(late_other)["commitTimestamp"] == newest - 40 == _stamp(emulator, "Account", old)
    assert header(late_same)["commitTimestamp"] == newest + 1 == _stamp(emulator, "Account", new)
    row = emulator.store.get_row("Account", new)
    assert iso_to_ms(row["LastModifiedDate"]) == newest + 1
    assert iso_to_ms(late_same["data"]["payload"]["LastModifiedDate"]) == newest + 1
    assert header(late_same)["commitNumber"] > header(late_other)["commitNumber"]
