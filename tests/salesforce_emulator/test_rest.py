"""The REST API through simple-salesforce: CRUD, describe, SOQL paging, composite retrieve, auth and budget."""

from __future__ import annotations

import pytest
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import (
    SalesforceExpiredSession,
    SalesforceMalformedRequest,
    SalesforceRefusedRequest,
    SalesforceResourceNotFound,
)

from salesforce_emulator import Emulator, ids
from salesforce_emulator.client import CaPinnedSession, simple_salesforce_client


def test_create_get_update_delete_roundtrip(sf: Salesforce):
    created = sf.Account.create(
        {"Name": "Acme", "BillingCity": "Springfield", "NumberOfEmployees": 250, "AnnualRevenue": 1_200_000}
    )
    record_id = created["id"]
    assert created["success"] and len(record_id) == 18 and record_id.startswith("001")
    assert ids.is_valid_id(record_id)
    record = sf.Account.get(record_id)
    assert record["Name"] == "Acme" and record["NumberOfEmployees"] == 250
    assert record["BillingAddress"]["city"] == "Springfield"
    assert record["Account_Score__c"] == 4.8  # formula: revenue / employees / 1000
    assert record["CreatedDate"].endswith("+0000") and record["SystemModstamp"] == record["CreatedDate"]
    assert sf.Account.update(record_id, {"Rating": "Hot", "BillingCity": None}) == 204
    record = sf.Account.get(record_id)
    assert record["Rating"] == "Hot" and record["BillingCity"] is None
    assert record["SystemModstamp"] > record["CreatedDate"]
    assert sf.Account.delete(record_id) == 204
    with pytest.raises(SalesforceResourceNotFound):
        sf.Account.get(record_id)


def test_contact_name_is_a_compound_of_first_and_last_name(sf: Salesforce):
    record_id = sf.Contact.create({"FirstName": "Ada", "LastName": "Lovelace", "Salutation": "Ms."})["id"]
    assert sf.Contact.get(record_id)["Name"] == "Ada Lovelace"
    assert record_id.startswith("003")
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.Contact.create({"FirstName": "No last name"})
    assert err.value.content[0]["errorCode"] == "REQUIRED_FIELD_MISSING"


def test_unknown_and_read_only_fields_are_rejected_with_salesforce_errors(sf: Salesforce):
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.Account.create({"Name": "x", "NoSuchField__c": 1})
    assert err.value.content == [
        {
            "message": "No such column 'NoSuchField__c' on sobject of type Account",
            "errorCode": "INVALID_FIELD",
            "fields": ["NoSuchField__c"],
        }
    ]
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.Account.create({"Name": "x", "SystemModstamp": "2025-01-01T00:00:00Z"})
    assert err.value.content[0]["errorCode"] == "INVALID_FIELD_FOR_INSERT_UPDATE"


def test_describe_lists_compound_formula_and_system_fields(sf: Salesforce):
    described = sf.Account.describe()
    assert described["keyPrefix"] == "001"
    fields = {f["name"]: f for f in described["fields"]}
    assert fields["BillingCity"]["compoundFieldName"] == "BillingAddress"
    assert fields["BillingAddress"]["type"] == "address"
    assert fields["Account_Score__c"]["calculated"] is True
    assert {"IsDeleted", "SystemModstamp", "LastModifiedDate"} <= fields.keys()
    for f in fields.values():
        assert {"name", "type", "nillable", "compoundFieldName", "calculated", "filterable"} <= f.keys()
    prefixes = {o["name"]: o["keyPrefix"] for o in sf.describe()["sobjects"]}
    assert prefixes == {
        "Account": "001",
        "Contact": "003",
        "Opportunity": "006",
        "Lead": "00Q",
        "Case": "500",
        "User": "005",
        "AccountHistory": "017",
        "AccountShare": "00r",
        "UserRole": "00E",
        "Attachment": "00P",
        "CaseStatus": "01J",
        "PermissionSet": "0PS",
        "FieldPermissions": "01k",
        "PermissionSetAssignment": "0Pa",
    }


def test_delete_undelete_and_empty_recycle_bin(sf: Salesforce, emulator: Emulator):
    record_id = sf.Lead.create({"LastName": "Lee", "Company": "Initech"})["id"]
    sf.Lead.delete(record_id)
    assert sf.query(f"SELECT Id FROM Lead WHERE Id = '{record_id}'")["totalSize"] == 0
    deleted = sf.query_all(f"SELECT Id, IsDeleted FROM Lead WHERE Id = '{record_id}'", include_deleted=True)
    assert deleted["records"][0]["IsDeleted"] is True
    sf.restful(f"sobjects/Lead/{record_id}/undelete", method="POST")
    assert sf.Lead.get(record_id)["IsDeleted"] is False
    sf.Lead.delete(record_id)
    sf.restful(f"sobjects/Lead/{record_id}/recycleBin", method="DELETE")
    assert sf.query_all(f"SELECT Id FROM Lead WHERE Id = '{record_id}'", include_deleted=True)["totalSize"] == 0
    assert emulator.store.snapshot("Lead") == []


def test_query_pages_2000_rows_with_next_records_url(sf: Salesforce, emulator: Emulator):
    with emulator.store.transaction() as txn:
        for n in range(4500):
            txn.create("Case", {"Subject": f"case {n}", "Priority": "High" if n % 3 == 0 else "Low"})
    first = sf.query("SELECT Id, Subject, CaseNumber FROM Case")
    assert first["totalSize"] == 4500 and len(first["records"]) == 2000 and not first["done"]
    assert first["nextRecordsUrl"].startswith("/services/data/v59.0/query/")
    everything = sf.query_all("SELECT Id, Subject FROM Case ORDER BY Subject DESC")
    assert len(everything["records"]) == 4500
    subjects = [r["Subject"] for r in everything["records"]]
    assert subjects == sorted(subjects, key=str.lower, reverse=True)
    counts = emulator.request_counts()
    assert counts["query"] == 2 and counts["query_more"] == 2
    assert sf.query("SELECT COUNT() FROM Case WHERE Priority = 'high'")["totalSize"] == 1500


def test_soql_filters_on_system_modstamp_ids_and_limits(sf: Salesforce):
    first = sf.Account.create({"Name": "first"})["id"]
    stamp = sf.Account.get(first)["SystemModstamp"].replace("+0000", "Z")
    second = sf.Account.create({"Name": "second"})["id"]
    third = sf.Account.create({"Name": "third", "Rating": "Warm"})["id"]
    newer = sf.query(f"SELECT Id FROM Account WHERE SystemModstamp > {stamp} ORDER BY SystemModstamp")
    assert [r["Id"] for r in newer["records"]] == [second, third]
    picked = sf.query(f"SELECT Id FROM Account WHERE Id IN ('{first}', '{third[:15]}') OR Rating = 'Warm'")
    assert {r["Id"] for r in picked["records"]} == {first, third}
    limited = sf.query("SELECT Name FROM Account WHERE Rating = null ORDER BY Name DESC LIMIT 1")
    assert [r["Name"] for r in limited["records"]] == ["second"]
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.query("SELECT Id FROM Account WHERE SystemModstamp > '2025-01-01'")
    assert err.value.content[0]["errorCode"] == "INVALID_QUERY_FILTER_OPERATOR"
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.query("SELECT Id, Bogus FROM Account")
    assert err.value.content[0]["errorCode"] == "INVALID_FIELD"


def test_composite_retrieve_returns_null_for_unknown_and_deleted_ids(sf: Salesforce, emulator: Emulator):
    kept = sf.Account.create({"Name": "kept"})["id"]
    gone = sf.Account.create({"Name": "gone"})["id"]
    sf.Account.delete(gone)
    unknown = ids.make_id("001", 999_999)
    result = sf.restful(
        "composite/sobjects/Account",
        method="POST",
        json={"ids": [unknown, kept, gone], "fields": ["Id", "Name", "SystemModstamp"]},
    )
    assert result[0] is None and result[2] is None
    assert result[1]["Id"] == kept and result[1]["Name"] == "kept"
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.restful("composite/sobjects/Account", method="POST", json={"ids": [kept], "fields": ["Nope"]})
    assert err.value.content[0]["errorCode"] == "INVALID_FIELD"
    with pytest.raises(SalesforceMalformedRequest):
        sf.restful("composite/sobjects/Account", method="POST", json={"ids": [kept] * 2001, "fields": ["Id"]})
    assert emulator.request_counts()["composite_retrieve"] == 3


@pytest.mark.parametrize("malformed", ["001000000000001\n", "00100000000001", "001000000000001ZZZ"])
def test_composite_retrieve_fails_whole_for_a_malformed_id_and_names_it(
    sf: Salesforce, emulator: Emulator, malformed: str
):
    """As Salesforce answers: not 15 or 18 letters and digits, or an 18-character id whose case-safe suffix does not
    match its first 15 characters, and the whole call fails with MALFORMED_ID naming the id (a well-formed id that
    names no record is null). A lower-case suffix is the same id."""
    kept = sf.Account.create({"Name": "kept"})["id"]
    with pytest.raises(SalesforceMalformedRequest) as err:
        sf.restful("composite/sobjects/Account", method="POST", json={"ids": [kept, malformed], "fields": ["Id"]})
    assert err.value.content == [{"errorCode": "MALFORMED_ID", "message": f"malformed id {malformed}"}]
    [record] = sf.restful(
        "composite/sobjects/Account", method="POST", json={"ids": [kept[:15] + kept[15:].lower()], "fields": ["Id"]}
    )
    assert record["Id"] == kept


def test_wrong_token_is_rejected_with_invalid_session_id(emulator: Emulator):
    intruder = simple_salesforce_client(emulator, token="not-the-token")
    with pytest.raises(SalesforceExpiredSession) as err:
        intruder.query("SELECT Id FROM Account")
    assert err.value.status == 401
    assert err.value.content == [{"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}]
    assert emulator.api_usage()["used"] == 0


def test_exhausted_daily_budget_returns_request_limit_exceeded(tmp_path):
    with Emulator(tmp_path / "org", daily_request_limit=3) as emu:
        sf = simple_salesforce_client(emu)
        for _ in range(3):
            sf.query("SELECT Id FROM Account")
        assert sf.api_usage["api-usage"].used == 3 and sf.api_usage["api-usage"].total == 3
        with pytest.raises(SalesforceRefusedRequest) as err:
            sf.query("SELECT Id FROM Account")
        assert err.value.content[0]["errorCode"] == "REQUEST_LIMIT_EXCEEDED"
        emu.set_request_budget(daily_request_limit=10)
        assert sf.limits()["DailyApiRequests"] == {"Max": 10, "Remaining": 6}


def test_every_response_carries_sforce_limit_info(emulator: Emulator):
    session = CaPinnedSession(emulator.ca_file)
    response = session.get(
        f"{emulator.instance_url}/services/data/v59.0/limits", headers={"Authorization": f"Bearer {emulator.token}"}
    )
    assert response.headers["Sforce-Limit-Info"] == "api-usage=1/1000000"
    missing = session.get(f"{emulator.instance_url}/services/data/v59.0/sobjects/Account/describe")
    assert missing.status_code == 401 and "Sforce-Limit-Info" in missing.headers


def test_plain_https_without_the_ca_is_refused(emulator: Emulator):
    session = CaPinnedSession(True)
    session.trust_env = False
    with pytest.raises(requests.exceptions.SSLError):
        session.get(f"{emulator.instance_url}/services/data")


def test_restart_keeps_the_org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        record_id = simple_salesforce_client(emu).Opportunity.create(
            {"Name": "Big deal", "StageName": "Prospecting", "CloseDate": "2025-12-31", "Amount": 5000}
        )["id"]
        before = emu.store.snapshot("Opportunity")
    with Emulator(tmp_path / "org") as emu:
        sf = simple_salesforce_client(emu)
        assert sf.Opportunity.get(record_id)["CloseDate"] == "2025-12-31"
        assert emu.store.snapshot("Opportunity") == before
        again = sf.Opportunity.create({"Name": "Next", "StageName": "Prospecting", "CloseDate": "2026-01-31"})
        assert again["id"] > record_id
        assert emu.store.snapshot("Opportunity")[-1]["SystemModstamp"] > before[0]["SystemModstamp"]
