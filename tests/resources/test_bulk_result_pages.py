"""Bulk API 2.0 parallel result pages (API 58.0+, `jobs/query/<id>/resultPages`) through SalesforceResource, over
the emulator's generated wide object (`Emulator.add_bulk_object`): the same records as locator paging, fetched
through the parallel pages where the org offers them, and locator paging where it does not."""

from __future__ import annotations

import pyarrow as pa
import pytest

from object_schema.describe import ObjectSchema
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, ids

RECORDS = 45_001
PAGE = 8_000


@pytest.fixture(scope="module")
def wide_org(tmp_path_factory: pytest.TempPathFactory):
    with Emulator(tmp_path_factory.mktemp("wide") / "org") as emu:
        name = emu.add_bulk_object(RECORDS, columns=64)
        emu.api.result_page_records = PAGE
        yield emu, name


def _client(emu: Emulator, version: str = "59.0") -> SalesforceResource:
    return SalesforceResource(
        instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file), api_version=version
    )


def _read(client: SalesforceResource, name: str, **options) -> pa.Table:
    fields = ObjectSchema.from_describe(client.describe(name)).org_fields
    return pa.Table.from_batches(list(client.bulk_query_all(name, fields, page_size=PAGE, **options)))


def test_parallel_result_pages_give_the_records_of_locator_paging(wide_org) -> None:
    emu, name = wide_org
    client = _client(emu)
    sequential = _read(client, name)
    emu.reset_request_counts()
    parallel = _read(client, name, parallel_pages=3)
    counts = emu.request_counts()
    assert counts.get("bulk_result_pages") == 2  # five page URIs, then the sixth
    assert counts.get("bulk_results") == 6  # ceil(45,001 / 8,000) pages, each fetched once
    assert parallel.num_columns == 64 and parallel.num_rows == RECORDS
    assert parallel.equals(sequential)
    assert parallel["Id"][0].as_py() == ids.make_id("aZz", 1)
    assert parallel["Id"][RECORDS - 1].as_py() == ids.make_id("aZz", RECORDS)
    assert sum(v == "true" for v in parallel["IsDeleted"].to_pylist()) == RECORDS // 1000


def test_an_org_without_parallel_result_pages_is_read_with_locators(wide_org) -> None:
    emu, name = wide_org
    emu.reset_request_counts()
    old = _read(_client(emu, version="57.0"), name, parallel_pages=3)  # resultPages came with API 58.0
    counts = emu.request_counts()
    assert old.num_rows == RECORDS and counts.get("bulk_results") == 6
    assert counts.get("bulk_result_pages") == 1  # asked once, answered 404
