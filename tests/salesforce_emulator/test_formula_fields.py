"""Formula fields in the emulator org: described as Salesforce's REST describe does, computed on every read (REST,
SOQL, Bulk API 2.0 through simple-salesforce), never in a change event; a cross-object formula changes when its
parent changes, with no event on the record itself."""

from __future__ import annotations

import csv
import io

from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.testing import body, header


def bulk_rows(sf: Salesforce, soql: str) -> dict[str, dict]:
    """A Bulk API 2.0 query through simple-salesforce, as CSV records by Id."""
    pages = getattr(sf.bulk2, soql.split(" FROM ")[1].split()[0]).query(soql, max_records=1000, wait=0.05)
    return {r["Id"]: r for page in pages for r in csv.DictReader(io.StringIO(page))}


def test_formula_fields_are_described_as_calculated_read_only_and_typed_by_their_result(sf: Salesforce):
    fields = {f["name"]: f for f in sf.Contact.describe()["fields"]}
    industry = fields["Account_Industry__c"]
    assert industry["calculated"] is True and industry["calculatedFormula"] == "TEXT(Account.Industry)"
    assert industry["type"] == "string" and not industry["createable"] and not industry["updateable"]
    assert fields["Account_Revenue__c"]["type"] == "currency"
    assert fields["LastName"]["calculated"] is False and fields["LastName"]["calculatedFormula"] is None
    opportunity = {f["name"]: f for f in sf.Opportunity.describe()["fields"]}
    assert {opportunity[n]["type"] for n in ("Expected_Amount__c", "Follow_Up_Date__c")} == {"currency", "date"}
    account = {f["name"]: f for f in sf.Account.describe()["fields"]}
    assert (account["Account_Score__c"]["type"], account["Revenue_Band__c"]["type"]) == ("double", "string")


def test_a_parent_change_moves_a_cross_object_formula_on_every_read_path_and_sends_no_child_event(
    sf: Salesforce, emulator: Emulator, landed_events
):
    account = sf.Account.create({"Name": "Acme", "Industry": "Energy", "AnnualRevenue": 2_000_000})["id"]
    contact = sf.Contact.create({"LastName": "Ng", "AccountId": account})["id"]
    opportunity = sf.Opportunity.create(
        {
            "Name": "Deal",
            "StageName": "Prospecting",
            "CloseDate": "2025-01-30",
            "Amount": 1000,
            "Probability": 25,
            "AccountId": account,
        }
    )["id"]
    assert sf.Account.get(account)["Revenue_Band__c"] == "Medium"
    assert (
        sf.Opportunity.get(opportunity)["Expected_Amount__c"],
        sf.Opportunity.get(opportunity)["Follow_Up_Date__c"],
    ) == (250.0, "2025-02-06")
    before = len(landed_events(emulator))
    sf.Account.update(account, {"Industry": "Banking", "AnnualRevenue": 90_000_000})
    events = landed_events(emulator)[before:]
    assert [header(e)["entityName"] for e in events] == ["Account"]
    assert not {"Revenue_Band__c", "Account_Score__c"} & set(body(events[0]))

    soql = "SELECT Id, Account_Industry__c, Account_Revenue__c FROM Contact"
    rest = sf.query(soql)["records"][0]
    assert (rest["Account_Industry__c"], rest["Account_Revenue__c"]) == ("Banking", 90_000_000.0)
    assert sf.Contact.get(contact)["Account_Industry__c"] == "Banking"
    assert bulk_rows(sf, soql)[contact] == {
        "Id": contact,
        "Account_Industry__c": "Banking",
        "Account_Revenue__c": "90000000.0",
    }
    assert bulk_rows(sf, "SELECT Id, Revenue_Band__c FROM Account")[account]["Revenue_Band__c"] == "Large"
    sf.Account.delete(account)  # no live parent: the cross-object formula is null
    assert bulk_rows(sf, soql)[contact]["Account_Industry__c"] == ""
    assert emulator.store.snapshot("Contact")[0]["Account_Industry__c"] is None
