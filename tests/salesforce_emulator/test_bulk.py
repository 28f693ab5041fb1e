"""Bulk API 2.0 query jobs over a 50k-record org: job lifecycle and CSV pages through Sforce-Locator."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator

import pytest

from salesforce_emulator import Emulator
from salesforce_emulator.client import CaPinnedSession, simple_salesforce_client

RECORDS = 50_000


@pytest.fixture(scope="module")
def big_org(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with Emulator(tmp_path_factory.mktemp("bulk") / "org") as emu:
        with emu.store.transaction() as txn:
            for n in range(RECORDS):
                txn.create(
                    "Contact",
                    {
                        "LastName": f"Last {n}",
                        "FirstName": None if n % 10 == 0 else f"First {n}",
                        "Email": f"c{n}@example.com",
                        "Title": 'says "hi", twice' if n == 7 else None,
                    },
                )
        with emu.store.transaction() as txn:
            txn.delete("Contact", emu.store.ids("Contact")[:100])
        yield emu


def _run_job(emu: Emulator, session: CaPinnedSession, operation: str, soql: str) -> str:
    base = f"{emu.instance_url}/services/data/v59.0/jobs/query"
    job = session.post(base, json={"operation": operation, "query": soql}).json()
    assert job["state"] in ("UploadComplete", "InProgress", "JobComplete")
    for _ in range(200):
        state = session.get(f"{base}/{job['id']}").json()["state"]
        if state == "JobComplete":
            return job["id"]
        time.sleep(0.05)
    raise AssertionError(f"job {job['id']} never completed")


def test_bulk_query_all_of_50k_records_over_several_locator_pages(big_org: Emulator):
    session = CaPinnedSession(big_org.ca_file)
    session.headers["Authorization"] = f"Bearer {big_org.token}"
    job_id = _run_job(
        big_org, session, "queryAll", "SELECT Id, FirstName, LastName, Title, SystemModstamp, IsDeleted FROM Contact"
    )
    results = f"{big_org.instance_url}/services/data/v59.0/jobs/query/{job_id}/results"
    rows, locators, locator = [], [], None
    while True:
        params = {"maxRecords": 12_000, **({"locator": locator} if locator else {})}
        page = session.get(results, params=params)
        assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/csv")
        parsed = list(csv.DictReader(io.StringIO(page.text)))
        assert len(parsed) == int(page.headers["Sforce-NumberOfRecords"])
        rows.extend(parsed)
        locator = page.headers["Sforce-Locator"]
        locators.append(locator)
        if locator == "null":
            break
    assert len(locators) == 5 and len(set(locators)) == 5
    assert len(rows) == RECORDS
    record_ids = [r["Id"] for r in rows]
    assert record_ids == sorted(set(record_ids))
    assert sum(r["IsDeleted"] == "true" for r in rows) == 100
    assert rows[0]["FirstName"] == "" and rows[1]["FirstName"] == "First 1"
    assert rows[7]["Title"] == 'says "hi", twice'
    assert rows[0]["SystemModstamp"].endswith("Z") and len(rows[0]["SystemModstamp"]) == 24
    assert big_org.request_counts()["bulk_results"] >= 5


def test_bulk_query_excludes_deleted_rows_and_pages_through_simple_salesforce(big_org: Emulator):
    sf = simple_salesforce_client(big_org)
    pages = list(sf.bulk2.Contact.query("SELECT Id, Email FROM Contact", max_records=20_000, wait=0.05))
    assert len(pages) == 3
    lines = sum(len(page.splitlines()) - 1 for page in pages)
    assert lines == RECORDS - 100


def test_bulk_job_errors_follow_salesforce(big_org: Emulator):
    session = CaPinnedSession(big_org.ca_file)
    session.headers["Authorization"] = f"Bearer {big_org.token}"
    base = f"{big_org.instance_url}/services/data/v59.0/jobs/query"
    bad = session.post(base, json={"operation": "query", "query": "SELECT Nope FROM Contact"})
    assert bad.status_code == 400 and bad.json()[0]["errorCode"] == "INVALID_FIELD"
    compound = session.post(base, json={"operation": "query", "query": "SELECT MailingAddress FROM Contact"})
    assert compound.status_code == 400
    assert session.get(f"{base}/750000000000000AAA").status_code == 404
    job_id = _run_job(big_org, session, "query", "SELECT Id FROM Contact LIMIT 10")
    assert session.get(f"{base}/{job_id}/results", params={"maxRecords": 0}).status_code == 400
    page = session.get(f"{base}/{job_id}/results")
    assert page.headers["Sforce-NumberOfRecords"] == "10" and page.headers["Sforce-Locator"] == "null"
    assert session.delete(f"{base}/{job_id}").status_code == 204
    assert session.get(f"{base}/{job_id}").status_code == 404


@pytest.mark.parametrize("line_ending", ["LF", "CRLF"])
def test_bulk_results_are_rfc4180_csv_with_the_jobs_line_ending(tmp_path, line_ending: str):
    """Every value quoted, quotes doubled, line breaks inside values kept as they are; records end with the job's
    lineEnding; a null is an empty unquoted cell. Python's csv module (RFC 4180) reads back every value."""
    texts = ['Hello, "world"\nsecond line\r\nthird\u2028fourth', '"', "   ", "😀🇫🇷 日本語, é", "\n", ",", 'x""y']
    with Emulator(tmp_path / "org") as emu:
        with emu.store.transaction() as txn:
            ids = [txn.create("Case", {"Subject": f"case {n}", "Description": text}) for n, text in enumerate(texts)]
            ids.append(txn.create("Case", {"Subject": "no description"}))
        session = CaPinnedSession(emu.ca_file)
        session.headers["Authorization"] = f"Bearer {emu.token}"
        base = f"{emu.instance_url}/services/data/v59.0/jobs/query"
        job = session.post(
            base,
            json={
                "operation": "queryAll",
                "lineEnding": line_ending,
                "query": "SELECT Id, Description FROM Case ORDER BY Id",
            },
        ).json()
        for _ in range(200):
            if session.get(f"{base}/{job['id']}").json()["state"] == "JobComplete":
                break
            time.sleep(0.05)
        raw = session.get(f"{base}/{job['id']}/results").content.decode()
    end = "\r\n" if line_ending == "CRLF" else "\n"
    assert raw.startswith('"Id","Description"' + end)
    assert f'"{ids[0]}","Hello, ""world""\nsecond line\r\nthird\u2028fourth"{end}' in raw
    assert raw.endswith(f'"{ids[-1]}",{end}')  # null: empty and unquoted
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    assert rows[0] == ["Id", "Description"]
    assert rows[1:] == [[i, t] for i, t in zip(ids, texts)] + [[ids[-1], ""]]
