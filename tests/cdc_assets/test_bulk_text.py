"""Free text through every path, end to end: thousands of Cases whose Subject and Description hold long multi-line
text with commas, doubled quotes, CRLF, U+2028 and 4-byte emoji, read over several Bulk API 2.0 locator pages of
more than 1 MiB each (emulator org -> simple-salesforce -> bulk_query_all), loaded and resynced through Dagster's
real materialize(), and followed through CDC: the replica equals the org field by field after each step."""

from __future__ import annotations

import random

import dagster as dg
import pyarrow as pa
import pytest
import requests
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import replica_key
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload
from salesforce_emulator.workload_data import PHRASES, free_text

CASES = 3_000
PAGE = 700  # records per Bulk result page: 5 pages, each over 1 MiB
# Values at the edges of CSV quoting: each is stored as is (Salesforce keeps whitespace; only "" means null).
EDGE_VALUES = ['"', '""', "   ", "\n", "\r\n", ",", '","', " leading and trailing ", "😀", 'a "quoted", value\n']


def email_body(rng: random.Random) -> str:
    return "\r\n\r\n".join(free_text(rng) for _ in range(rng.randint(3, 8)))


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        rng = random.Random(42)
        with emu.store.transaction() as txn:
            for n in range(CASES):
                description = EDGE_VALUES[n // 300] if n % 300 == 0 and n // 300 < len(EDGE_VALUES) else email_body(rng)
                txn.create(
                    "Case",
                    {
                        "Subject": f'Re: "{rng.choice(PHRASES)}", #{n}',
                        "Description": description,
                        "Status": "New",
                        "Origin": "Email",
                    },
                )
        yield emu


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


@pytest.mark.parametrize("line_ending", ["LF", "CRLF"])
def test_bulk_query_all_reads_multi_line_text_over_pages_larger_than_a_mebibyte(org: Emulator, line_ending: str):
    salesforce = resource(org)
    page_bytes: list[int] = []

    def remember(response: requests.Response, *args, **kwargs) -> None:
        if response.url.split("?")[0].endswith("/results"):
            page_bytes.append(len(response.content))

    salesforce.client().session.hooks["response"].append(remember)
    fields = ["Id", "Subject", "Description", "IsDeleted", "SystemModstamp"]
    table = pa.Table.from_batches(
        list(salesforce.bulk_query_all("Case", fields, page_size=PAGE, line_ending=line_ending))
    )

    assert len(page_bytes) == 5 and min(page_bytes[:-1]) > 2**20, page_bytes
    got = {r["Id"]: r for r in table.to_pylist()}
    org_rows = {r["Id"]: r for r in org.store.snapshot("Case")}
    assert len(got) == table.num_rows == CASES
    mismatched = [
        i for i, r in org_rows.items() if (got[i]["Subject"], got[i]["Description"]) != (r["Subject"], r["Description"])
    ]
    assert mismatched == []
    assert {got[i]["Description"] for i in org_rows if org_rows[i]["Description"] in EDGE_VALUES} == set(EDGE_VALUES)


def test_initial_load_cdc_and_resync_of_multi_line_text_equal_the_org(tmp_path, org: Emulator):
    platform = Platform(
        tmp_path / "p",
        None,
        ["Case"],
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        bulk_page_size=PAGE,
        bulk_parallel_pages=1,
    )  # pages of PAGE records: values cross them
    org.flush_cdc()
    first = platform.run(close_after=0)
    loaded = platform.materialization(first, "Case")
    assert (loaded["mode"], loaded["snapshot_rows"]) == ("initial_load", CASES)
    assert org.request_counts()["bulk_results"] == 5
    assert differences(org, "Case", platform.rows("Case")) == []

    Workload(org, seed=9).run(changes=400)  # Case updates carry new multi-line descriptions through CDC
    org.flush_cdc()
    platform.run(close_after=0)
    ce = platform.change_events()
    assert any("\n" in (dict(e["fields"] or []).get("Description") or "") for e in ce if e["change_type"] == "UPDATE")
    assert platform.quarantine() == []
    assert differences(org, "Case", platform.rows("Case")) == []

    with org.store.transaction() as txn:
        for record_id in org.store.ids("Case")[:50]:
            txn.update("Case", record_id, {"Description": 'changed\r\nagain, "quoted" 🙈'})
    org.flush_cdc()
    resync = {replica_key("Case").to_python_identifier(): {"config": {"mode": "resync", "transaction_close_after": 0}}}
    resynced = dg.materialize(
        platform.executable_assets(),
        resources=platform.defs.resources,
        instance=platform.instance,
        run_config={"ops": resync},
    )
    assert platform.materialization(resynced, "Case")["mode"] == "resync"
    assert org.request_counts()["bulk_results"] == 10
    assert differences(org, "Case", platform.rows("Case")) == []
