"""What a poller meets in the emulator: commits sharing a SystemModstamp, commits stamped in the past, and Bulk
API 2.0 jobs read by `WHERE SystemModstamp >= ... ORDER BY SystemModstamp, Id`, resumable from a locator."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from resources.salesforce import BulkPosition, SalesforceApiError, SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.values import ms_to_iso


def modstamps(emu: Emulator, name: str) -> dict[str, str]:
    return {r["Id"]: r["SystemModstamp"] for r in emu.store.snapshot(name)}


def test_same_timestamp_and_late_commits(emulator: Emulator, landed_events):
    with emulator.store.transaction() as txn:
        first = txn.create("Account", {"Name": "first"})
    emulator.same_timestamp_commits(2)
    with emulator.store.transaction() as txn:
        second = txn.create("Account", {"Name": "second"})
    with emulator.store.transaction() as txn:
        third = txn.create("Account", {"Name": "third"})
    stamps = modstamps(emulator, "Account")
    assert stamps[first] == stamps[second] == stamps[third]
    events = [
        e for e in landed_events(emulator) if e["data"]["payload"]["ChangeEventHeader"]["entityName"] == "Account"
    ]
    headers = [e["data"]["payload"]["ChangeEventHeader"] for e in events]
    assert len({h["commitTimestamp"] for h in headers}) == 1 and len({h["commitNumber"] for h in headers}) == 3

    emulator.late_commits(2, 1000)
    with emulator.store.transaction() as txn:
        late = txn.create("Account", {"Name": "late"})
    with emulator.store.transaction() as txn:  # late too, but it changes a record stamped after it
        txn.update("Account", first, {"Name": "changed late"})
    with emulator.store.transaction() as txn:
        later = txn.create("Account", {"Name": "after"})
    stamps = modstamps(emulator, "Account")
    assert stamps[late] == ms_to_iso(stamps_ms(stamps[third]) - 1000)  # older than rows already visible
    assert stamps_ms(stamps[first]) == stamps_ms(stamps[third]) + 1  # never moved back: 1 ms after its own stamp
    assert stamps_ms(stamps[later]) >= stamps_ms(stamps[first])  # the clock goes on from the newest commit


def stamps_ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_a_bulk_job_by_systemmodstamp_resumes_from_a_locator(emulator: Emulator):
    with emulator.store.transaction() as txn:
        old = [txn.create("Account", {"Name": f"old {i}"}) for i in range(5)]
    time.sleep(0.002)  # two commits in one millisecond share a SystemModstamp (as in an org): `old` must be older
    with emulator.store.transaction() as txn:
        new = [txn.create("Account", {"Name": f"new {i}"}) for i in range(7)]
    since = modstamps(emulator, "Account")[new[0]]
    sf = SalesforceResource(
        instance_url=emulator.instance_url, access_token=emulator.token, ca_bundle=str(emulator.ca_file)
    )
    emulator.reset_request_counts()
    positions: list[BulkPosition] = []
    reader = sf.bulk_query_all(
        "Account",
        ["Id"],
        page_size=3,
        where=f"SystemModstamp >= {since}",
        order_by="SystemModstamp, Id",
        on_page=positions.append,
    )
    seen: list[str] = []
    for batch in reader:
        if positions:  # page 1 was handed over (and committed by a poller): the run dies here, the job stays
            break
        seen += batch.column(0).to_pylist()
    assert positions[0].locator is not None
    resumed = [
        i
        for b in sf.bulk_query_all("Account", ["Id"], page_size=3, resume=positions[0])
        for i in b.column(0).to_pylist()
    ]
    assert seen + resumed == sorted(new) and not set(old) & set(seen + resumed)
    assert emulator.request_counts()["bulk_query_job"] == 1  # one job created, read by two readers
    reader.close()


def test_objects_without_systemmodstamp_or_isdeleted_are_shaped_as_in_a_real_org(emulator: Emulator):
    """AccountHistory has only CreatedDate, AccountShare LastModifiedDate, UserRole no IsDeleted (nor recycle bin):
    describe() leaves the others out, SOQL rejects them, queryAll returns no deleted UserRole; none has CDC."""
    sf = SalesforceResource(
        instance_url=emulator.instance_url, access_token=emulator.token, ca_bundle=str(emulator.ca_file)
    )
    described = {
        name: {f["name"] for f in sf.describe(name)["fields"]}
        for name in ("AccountHistory", "AccountShare", "UserRole")
    }
    assert "CreatedDate" in described["AccountHistory"] and "IsDeleted" in described["AccountHistory"]
    assert not {"SystemModstamp", "LastModifiedDate"} & described["AccountHistory"]
    assert "LastModifiedDate" in described["AccountShare"]
    assert not {"SystemModstamp", "CreatedDate"} & described["AccountShare"]
    assert "SystemModstamp" in described["UserRole"] and "IsDeleted" not in described["UserRole"]
    with pytest.raises(SalesforceApiError, match="SystemModstamp"):
        list(sf.query_all("SELECT Id, SystemModstamp FROM AccountHistory"))
    with emulator.store.transaction() as txn:
        kept = txn.create("UserRole", {"Name": "CEO"})
        gone = txn.create("UserRole", {"Name": "Temp"})
    with emulator.store.transaction() as txn:
        txn.delete("UserRole", [gone])
    assert [r["Id"] for r in sf.query_all("SELECT Id FROM UserRole")] == [kept]
    assert not emulator.publisher.is_enabled("AccountHistory")
