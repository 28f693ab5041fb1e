"""SalesforceResource against the real HTTPS emulator: describe, retrieve, queryAll, Bulk → Arrow, limits, retries,
OAuth, EnvVar configuration through a real Dagster run."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import jwt
import pyarrow as pa
import pytest
import requests
from simple_salesforce import format_soql

from resources.salesforce import (
    NOT_AN_ID,
    SalesforceApiError,
    SalesforceResource,
    parse_bulk_page,
    salesforce_resource_from_env,
    select_soql,
)
from salesforce_emulator import Emulator
from salesforce_emulator.ids import make_id
from salesforce_emulator.tls import connected_app_key_pair


@pytest.fixture(scope="module")
def org(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with Emulator(tmp_path_factory.mktemp("resource") / "org") as emu:
        with emu.store.transaction() as txn:
            for n in range(4_100):
                txn.create(
                    "Account",
                    {
                        "Name": f"Account {n}",
                        "BillingCity": "Paris" if n % 2 else None,
                        "NumberOfEmployees": n,
                        "AnnualRevenue": 1000.0 * n,
                    },
                )
        with emu.store.transaction() as txn:
            txn.delete("Account", emu.store.ids("Account")[:10])
        yield emu


@pytest.fixture
def resource(org: Emulator) -> SalesforceResource:
    org.reset_request_counts()
    return SalesforceResource(
        instance_url=org.instance_url, access_token=org.token, ca_bundle=org.ca_file, retry_backoff_seconds=0.01
    )


def test_replicated_fields_drop_compound_parents_formulas_and_system_fields(resource: SalesforceResource):
    names = [f["name"] for f in resource.replicated_fields("Account")]
    assert "BillingCity" in names and "Id" in names and "LastModifiedDate" in names
    assert not {"BillingAddress", "ShippingAddress", "Account_Score__c", "IsDeleted", "SystemModstamp"} & set(names)
    contact = [f["name"] for f in resource.replicated_fields("Contact")]
    assert {"FirstName", "LastName", "Salutation"} <= set(contact) and "Name" not in contact
    assert resource.describe("Account")["keyPrefix"] == "001"


def test_retrieve_batches_2000_ids_per_call_and_yields_none_for_gone_ids(resource: SalesforceResource, org: Emulator):
    all_ids = org.store.ids("Account", include_deleted=True)
    wanted = [*all_ids, make_id("001", 9_999_999)]
    records = list(resource.retrieve("Account", wanted, ["Id", "Name", "SystemModstamp"]))
    assert len(records) == len(wanted) == 4_101
    assert org.request_counts()["composite_retrieve"] == 3  # ceil(4101 / 2000)
    assert records[:10] == [None] * 10 and records[-1] is None
    assert records[10] == {"Id": all_ids[10], "Name": "Account 10", "SystemModstamp": records[10]["SystemModstamp"]}
    assert "attributes" not in records[10]


def test_ids_the_org_refuses_are_isolated_and_the_other_ids_are_still_read(resource: SalesforceResource, org: Emulator):
    """One malformed id fails the whole sObject Collections call (MALFORMED_ID naming it, as Salesforce answers):
    it is asked for alone and the rest together. An id without an id's form is never sent."""
    good = org.store.ids("Account")[10:13]
    bad_suffix = good[1][:15] + "ZZZ"  # a wrong case-safe suffix: well formed to the parse, refused by the org
    not_an_id = "001000000000001\n"
    refused: dict[str, str] = {}
    records = list(
        resource.retrieve("Account", [good[0], bad_suffix, not_an_id, good[2]], ["Id", "Name"], refused=refused)
    )
    assert [r and r["Id"] for r in records] == [good[0], None, None, good[2]]
    assert refused == {bad_suffix: f"MALFORMED_ID: malformed id {bad_suffix}", not_an_id: NOT_AN_ID}
    assert org.request_counts()["composite_retrieve"] == 3  # the failed call, the refused id alone, the others
    with pytest.raises(SalesforceApiError, match="INVALID_FIELD"):  # any other refusal still fails the read
        list(resource.retrieve("Account", good, ["Id", "NoSuchField__c"]))


def test_a_refusal_that_names_no_id_is_isolated_by_halving(
    resource: SalesforceResource, org: Emulator, monkeypatch: pytest.MonkeyPatch
):
    """An error that does not say which id (a fault the emulator does not make, hence the wrapper): the batch is
    halved until each refused id stands alone."""
    good = org.store.ids("Account")[20:28]
    wanted = [*good[:2], good[2][:15] + "ZZZ", *good[3:6], good[6][:15] + "ZZZ", good[7]]
    ask = SalesforceResource._retrieve_batch

    def vague(self, object_name, ids, fields):
        try:
            return ask(self, object_name, ids, fields)
        except SalesforceApiError as exc:
            raise SalesforceApiError(
                "POST", "composite/sobjects/Account", 400, '[{"errorCode": "MALFORMED_ID", "message": "malformed id"}]'
            ) from exc

    monkeypatch.setattr(SalesforceResource, "_retrieve_batch", vague)
    refused: dict[str, str] = {}
    records = list(resource.retrieve("Account", wanted, ["Id"], refused=refused))
    assert [r and r["Id"] for r in records] == [*good[:2], None, *good[3:6], None, good[7]]
    assert sorted(refused) == sorted([wanted[2], wanted[6]])
    # 8 ids; each half of 4 holds one refused id: its two pairs, then the pair holding it as two single ids
    assert org.request_counts()["composite_retrieve"] == 1 + 2 * (1 + 2 + 2)


def test_soql_values_are_quoted_by_format_soql_and_the_org_parses_them(resource: SalesforceResource):
    names = ["O'Brien \\ Sons", "Account 4000"]
    soql = select_soql("Account", ["Id", "Name"], where=format_soql("Name IN {}", names), order_by="Name", limit=5)
    assert soql == (
        "SELECT Id, Name FROM Account WHERE Name IN ('O\\'Brien \\\\ Sons','Account 4000') ORDER BY Name LIMIT 5"
    )
    assert [r["Name"] for r in resource.query_all(soql)] == ["Account 4000"]


def test_query_all_pages_and_includes_deleted_rows(resource: SalesforceResource, org: Emulator):
    rows = list(resource.query_all("SELECT Id, IsDeleted FROM Account"))
    assert len(rows) == 4_100 and sum(r["IsDeleted"] for r in rows) == 10
    assert org.request_counts()["query_more"] == 2
    live = list(resource.query_all("SELECT Id FROM Account", include_deleted=False))
    assert len(live) == 4_090


def test_bulk_query_all_streams_string_record_batches_page_by_page(resource: SalesforceResource, org: Emulator):
    fields = ["Id", "Name", "BillingCity", "NumberOfEmployees", "IsDeleted", "SystemModstamp"]
    batches = list(resource.bulk_query_all("Account", fields, page_size=1_000))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert all(b.schema == pa.schema([(f, pa.string()) for f in fields]) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 4_100
    assert table.column("IsDeleted").to_pylist().count("true") == 10
    cities = table.column("BillingCity").to_pylist()
    assert cities[0] is None and cities[1] == "Paris"
    assert table.column("NumberOfEmployees").to_pylist()[42] == "42"
    counts = org.request_counts()
    assert counts["bulk_results"] == 5 and counts["bulk_query_job"] == 1 and counts["bulk_job_delete"] == 1
    assert max(b.num_rows for b in batches) <= 1_000


TRICKY = {  # Bulk CSV cell (RFC 4180) -> the value it holds
    '"a, b"': "a, b",
    '"say ""hi"""': 'say "hi"',
    '""""': '"',
    '"   "': "   ",
    '" padded "': " padded ",
    '"line 1\nline 2"': "line 1\nline 2",
    '"crlf\r\ninside"': "crlf\r\ninside",
    '"lone\rcr"': "lone\rcr",
    '"emoji 😀🇫🇷 日本 é"': "emoji 😀🇫🇷 日本 é",
    '"\u2028sep"': "\u2028sep",
    '""': None,
    "": None,
    '"ends with newline\n"': "ends with newline\n",
    '"\n"': "\n",
    '","': ",",
}


@pytest.mark.parametrize("line_ending", ["\n", "\r\n"])
@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_bulk_pages_keep_quoted_commas_quotes_line_breaks_and_unicode(line_ending: str, bom: bytes):
    cells = list(TRICKY.items())
    page = (
        '"Id","Description"'
        + line_ending
        + "".join(f'"{n:03d}",{cell}{line_ending}' for n, (cell, _) in enumerate(cells))
    )
    rows = pa.Table.from_batches(list(parse_bulk_page(bom + page.encode(), ["Id", "Description"]))).to_pylist()
    assert rows == [{"Id": f"{n:03d}", "Description": value} for n, (_, value) in enumerate(cells)]


def test_bulk_pages_over_a_mebibyte_with_multi_line_values_and_a_record_larger_than_a_block():
    """pyarrow reads CSV in 1 MiB blocks cut at line breaks: without newlines_in_values a multi-line value past the
    first block fails the page ("Expected 18 columns, got 6"); a single record over a block straddles it."""
    fields = ["Id", "Description", "Subject"]
    body = 'Hello,\n"quoted" 😀\r\nRegards' * 40
    rows = [(f"{n:05d}", body if n != 1_500 else "x\n" * 1_200_000, f"subject {n}, ok") for n in range(3_000)]
    page = '"Id","Description","Subject"\n' + "".join(
        ",".join('"' + v.replace('"', '""') + '"' for v in row) + "\n" for row in rows
    )
    assert len(page.encode()) > 3 * 2**20
    table = pa.Table.from_batches(list(parse_bulk_page(page.encode(), fields)))
    assert table.num_rows == 3_000
    assert table.to_pydict() == {f: [r[i] for r in rows] for i, f in enumerate(fields)}


def test_api_usage_comes_from_the_last_sforce_limit_info(resource: SalesforceResource, org: Emulator):
    resource.describe("Lead")
    usage = resource.api_usage()
    assert usage == {"used": org.api_usage()["used"], "limit": 1_000_000}


def test_reads_retry_on_server_errors(resource: SalesforceResource, org: Emulator, caplog):
    org.fail_next_requests(2, status=503)
    with caplog.at_level(logging.WARNING):
        assert resource.describe("Case")["keyPrefix"] == "500"
    assert "HTTP 503; retry 2/4" in caplog.text
    org.fail_next_requests(5, status=500)
    with pytest.raises(SalesforceApiError) as err:
        resource.describe("Opportunity")
    assert err.value.status == 500
    assert org.token not in caplog.text


def test_wrong_token_fails_without_logging_the_token(org: Emulator, caplog):
    resource = SalesforceResource(instance_url=org.instance_url, access_token="s3cret-wrong", ca_bundle=org.ca_file)
    with caplog.at_level(logging.DEBUG), pytest.raises(SalesforceApiError) as err:
        resource.describe("Account")
    assert err.value.status == 401 and "INVALID_SESSION_ID" in str(err.value)
    assert "s3cret-wrong" not in caplog.text and "s3cret-wrong" not in str(err.value)


def test_oauth_client_credentials_against_the_emulator(org: Emulator):
    resource = SalesforceResource(
        instance_url=org.instance_url,
        client_id="emulator-client",
        client_secret="emulator-secret",
        ca_bundle=org.ca_file,
    )
    assert resource.describe("Contact")["keyPrefix"] == "003"
    bad = SalesforceResource(
        instance_url=org.instance_url, client_id="emulator-client", client_secret="nope", ca_bundle=org.ca_file
    )
    with pytest.raises(SalesforceApiError) as err:
        bad.client()
    assert "invalid_client" in str(err.value) and "nope" not in str(err.value)


@pytest.fixture
def jwt_app(org: Emulator, tmp_path: Path) -> Path:
    """A key pair for the JWT bearer flow, its certificate uploaded to the emulator's connected app."""
    key_file, certificate = connected_app_key_pair(tmp_path / "app")
    org.register_jwt_certificate(certificate)
    return key_file


def jwt_env(org: Emulator, key_file: Path) -> dict[str, str]:
    return {
        "SF_INSTANCE_URL": org.instance_url,
        "SF_CLIENT_ID": "emulator-client",
        "SF_USERNAME": "dev@emulator.local",
        "SF_PRIVATE_KEY_FILE": str(key_file),
        "SF_CA_BUNDLE": org.ca_file,
    }


def test_oauth_jwt_bearer_from_variables_logs_in_and_renews_the_session(org: Emulator, jwt_app: Path):
    resource = salesforce_resource_from_env(jwt_env(org, jwt_app), resolved=True)
    assert resource.login_flow == "jwt_bearer"
    assert resource.describe("Contact")["keyPrefix"] == "003"
    assert resource.session() == (org.token, org.instance_url)
    old = org.token
    try:
        renewed = org.expire_session()  # the session expires: a new assertion logs in again, no secret needed
        resource.relogin()
        assert resource.session()[0] == renewed != old
    finally:
        org.expire_session(old)


def _token_error(org: Emulator, assertion_claims: dict, key_file: Path) -> dict:
    claims = {
        "iss": "emulator-client",
        "sub": "dev@emulator.local",
        "aud": "https://login.salesforce.com",
        "exp": int(time.time()) + 180,
    } | assertion_claims
    assertion = jwt.encode({k: v for k, v in claims.items() if v is not None}, key_file.read_bytes(), algorithm="RS256")
    response = requests.post(
        f"{org.instance_url}/services/oauth2/token",
        verify=org.ca_file,
        data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion},
    )
    assert response.status_code == 400
    return response.json()


def test_jwt_assertions_the_org_refuses(org: Emulator, jwt_app: Path, tmp_path: Path):
    stranger, _ = connected_app_key_pair(tmp_path / "stranger")  # a key whose certificate the app does not hold
    assert _token_error(org, {}, stranger) == {"error": "invalid_grant", "error_description": "invalid assertion"}
    assert _token_error(org, {"iss": "another-app"}, jwt_app)["error"] == "invalid_client_id"
    assert (
        _token_error(org, {"sub": "someone@else"}, jwt_app)["error_description"] == "user hasn't approved this consumer"
    )
    assert _token_error(org, {"aud": "https://example.com"}, jwt_app)["error_description"] == "audience is invalid"
    assert "expired" in _token_error(org, {"exp": int(time.time()) - 5}, jwt_app)["error_description"]
    assert _token_error(org, {"exp": None}, jwt_app)["error_description"] == "invalid assertion"


def test_client_credentials_as_http_basic_auth_and_userinfo_names_the_org(org: Emulator):
    token = requests.post(
        f"{org.instance_url}/services/oauth2/token",
        verify=org.ca_file,
        auth=("emulator-client", "emulator-secret"),
        data={"grant_type": "client_credentials"},
    )
    assert token.status_code == 200 and token.json()["access_token"] == org.token
    info = requests.get(
        f"{org.instance_url}/services/oauth2/userinfo",
        verify=org.ca_file,
        headers={"Authorization": f"Bearer {org.token}"},
    )
    assert info.json()["organization_id"] == org.tenant_id and info.json()["preferred_username"] == "dev@emulator.local"
    assert (
        requests.get(
            f"{org.instance_url}/services/oauth2/userinfo",
            verify=org.ca_file,
            headers={"Authorization": "Bearer wrong"},
        ).status_code
        == 401
    )


@pytest.mark.parametrize(
    ("variables", "flow"),
    [
        ({"SF_ACCESS_TOKEN": "t", "SF_INSTANCE_URL": "https://x", "SF_CLIENT_ID": "c"}, "token"),
        ({"SF_CLIENT_ID": "c", "SF_USERNAME": "u", "SF_PRIVATE_KEY_FILE": "k"}, "jwt_bearer"),
        ({"SF_CLIENT_ID": "c", "SF_CLIENT_SECRET": "s", "SF_INSTANCE_URL": "https://x"}, "client_credentials"),
        (
            {
                "SF_CLIENT_ID": "c",
                "SF_CLIENT_SECRET": "s",
                "SF_INSTANCE_URL": "https://x",
                "SF_USERNAME": "u",
                "SF_PASSWORD": "p",
            },
            "password",
        ),
        ({"SF_USERNAME": "u", "SF_PASSWORD": "p", "SF_SECURITY_TOKEN": "t"}, "soap"),
    ],
)
def test_the_variables_choose_the_login_flow(variables: dict[str, str], flow: str):
    assert salesforce_resource_from_env(variables, resolved=True).login_flow == flow


def test_incomplete_credentials_say_which_variables_to_set():
    with pytest.raises(ValueError, match="SF_PRIVATE_KEY_FILE"):
        salesforce_resource_from_env({"SF_CLIENT_ID": "c"}, resolved=True).client()


def test_env_vars_configure_the_resource_in_a_dagster_run(org: Emulator, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SF_INSTANCE_URL", org.instance_url)
    monkeypatch.setenv("SF_ACCESS_TOKEN", org.token)
    monkeypatch.setenv("SF_CA_BUNDLE", org.ca_file)
    seen = {}

    @dg.asset
    def account_fields(salesforce: SalesforceResource) -> None:
        seen["fields"] = [f["name"] for f in salesforce.replicated_fields("Account")]
        seen["usage"] = salesforce.api_usage()

    result = dg.materialize(
        [account_fields],
        resources={"salesforce": salesforce_resource_from_env()},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    assert "Name" in seen["fields"] and seen["usage"]["limit"] == 1_000_000


def test_without_credentials_the_local_emulator_is_the_default(monkeypatch):
    for var in ("SF_INSTANCE_URL", "SF_ACCESS_TOKEN", "SF_USERNAME", "SF_CLIENT_ID", "SF_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    resource = salesforce_resource_from_env({})
    assert resource.instance_url == "https://127.0.0.1:8443" and resource.access_token == "dev-token"
