"""SalesforceResource when the network or the org's limits fail it (against the real HTTPS emulator): a read that
times out, a connection dropped in the middle of a response and a 5xx answer to a read (one sent as POST too) are
retried; a creation, an exhausted API budget (REQUEST_LIMIT_EXCEEDED) or a rejected token is not, and fails with
Salesforce's error."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests

from resources.salesforce import SalesforceApiError, SalesforceResource
from salesforce_emulator import Emulator

ACCOUNTS = 2_500  # 2 REST query pages, 3 Bulk result pages of 1,000


@pytest.fixture(scope="module")
def org(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with Emulator(tmp_path_factory.mktemp("network") / "org") as emu:
        with emu.store.transaction() as txn:
            for n in range(ACCOUNTS):
                txn.create("Account", {"Name": f"Account {n}", "NumberOfEmployees": n})
        yield emu


@pytest.fixture
def resource(org: Emulator) -> Iterator[SalesforceResource]:
    org.reset_request_counts()
    yield SalesforceResource(
        instance_url=org.instance_url,
        access_token=org.token,
        ca_bundle=org.ca_file,
        retry_backoff_seconds=0.01,
        timeout_seconds=1.0,
    )
    org.clear_network_faults()
    org.fail_next_requests(0)
    org.set_request_budget(daily_request_limit=1_000_000, used=0)


def test_a_read_that_times_out_is_retried(resource: SalesforceResource, org: Emulator, caplog):
    org.stall_next_requests(1, seconds=2.0, kind="describe")
    with caplog.at_level(logging.WARNING):
        assert resource.describe("Account")["name"] == "Account"
    assert "ReadTimeoutError; retry 1/4" in caplog.text
    assert org.request_counts()["describe"] == 2


def test_a_connection_dropped_in_the_middle_of_a_bulk_page_is_retried(
    resource: SalesforceResource, org: Emulator, caplog
):
    org.drop_next_responses(1, kind="bulk_results")
    with caplog.at_level(logging.WARNING):
        batches = list(resource.bulk_query_all("Account", ["Id", "Name"], page_size=1000))
    ids = pa.Table.from_batches(batches)["Id"].to_pylist()
    assert len(ids) == len(set(ids)) == ACCOUNTS  # every record once: the cut page was fetched again, whole
    assert "retry 1/4" in caplog.text
    assert org.request_counts()["bulk_results"] == 4  # 3 pages, the first one twice


def test_a_connection_dropped_in_the_middle_of_a_query_page_is_retried(resource: SalesforceResource, org: Emulator):
    org.drop_next_responses(1, kind="query")  # the first page: the retry runs the query again
    rows = list(resource.query_all("SELECT Id FROM Account"))
    assert len({r["Id"] for r in rows}) == len(rows) == ACCOUNTS


def test_request_limit_exceeded_fails_at_once_with_salesforces_error(
    resource: SalesforceResource, org: Emulator, caplog
):
    org.set_request_budget(daily_request_limit=100, used=100)
    with caplog.at_level(logging.WARNING), pytest.raises(SalesforceApiError) as err:
        resource.describe("Contact")
    assert err.value.status == 403 and "REQUEST_LIMIT_EXCEEDED" in str(err.value)
    assert "retry" not in caplog.text  # waiting seconds would not bring a daily budget back


def test_a_creation_is_not_retried_after_a_dropped_response(resource: SalesforceResource, org: Emulator):
    """A Bulk job creation is not idempotent: a cut response fails the call instead of creating a second job."""
    org.drop_next_responses(1, kind="bulk_query_job")
    with pytest.raises(requests.RequestException):
        list(resource.bulk_query_all("Account", ["Id"]))
    assert org.request_counts()["bulk_query_job"] == 1


def test_a_read_sent_as_post_is_retried_on_server_errors(resource: SalesforceResource, org: Emulator, caplog):
    """sObject Collections reads by POST: retried like a GET, though urllib3 retries no POST by default."""
    ids = org.store.ids("Account")[:3]
    org.fail_next_requests(2, status=503)
    with caplog.at_level(logging.WARNING):
        records = list(resource.retrieve("Account", ids, ["Id", "Name"]))
    assert [r["Id"] for r in records] == ids
    assert "HTTP 503; retry 2/4" in caplog.text


def test_a_creation_is_not_retried_on_a_server_error(resource: SalesforceResource, org: Emulator, caplog):
    org.fail_next_requests(1, status=503)  # the first request: the Bulk job's creation
    with caplog.at_level(logging.WARNING), pytest.raises(SalesforceApiError) as err:
        list(resource.bulk_query_all("Account", ["Id"]))
    assert err.value.status == 503 and "retry" not in caplog.text
    assert org.request_counts().get("bulk_query_job", 0) <= 1
