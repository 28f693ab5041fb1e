"""Scripted changes through the REST API produce, line by line, the events Salesforce would send."""

from __future__ import annotations

from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.testing import body, header
from salesforce_emulator.values import iso_to_ms

FORBIDDEN = {"IsDeleted", "SystemModstamp", "Account_Score__c", "Id"}


def test_scripted_account_lifecycle_produces_salesforce_events(sf: Salesforce, emulator: Emulator, landed_events):
    record_id = sf.Account.create(
        {
            "Name": "Acme Corp",
            "Industry": "Manufacturing",
            "AnnualRevenue": 1_200_000,
            "NumberOfEmployees": 250,
            "BillingStreet": "1 Main St",
            "BillingCity": "Springfield",
            "Phone": "+1 555 0100",
        }
    )["id"]
    sf.Account.update(record_id, {"Industry": "Energy", "Rating": "Hot"})
    sf.Account.update(record_id, {"BillingCity": "Chicago"})
    sf.Account.update(record_id, {"Phone": None, "Description": "moved"})
    sf.Account.delete(record_id)
    sf.restful(f"sobjects/Account/{record_id}/undelete", method="POST")

    events = landed_events(emulator)
    assert [header(e)["changeType"] for e in events] == ["CREATE", "UPDATE", "UPDATE", "UPDATE", "DELETE", "UNDELETE"]
    for event in events:
        assert event["channel"] == "/data/ChangeEvents" and set(event["data"]) == {"schema", "payload", "event"}
        assert header(event)["recordIds"] == [record_id] and header(event)["entityName"] == "Account"
        assert header(event)["sequenceNumber"] == 1 and not {"nulledFields", "diffFields"} & header(event).keys()
        assert not FORBIDDEN & body(event).keys()
    create, two_fields, city, nulling, delete, undelete = events

    assert body(create)["BillingAddress"] == {"Street": "1 Main St", "City": "Springfield"}
    assert body(create)["Name"] == "Acme Corp" and body(create)["AnnualRevenue"] == 1_200_000.0
    assert "Rating" not in body(create) and header(create)["changedFields"] == []
    assert body(create)["CreatedDate"] == body(create)["LastModifiedDate"]
    assert body(create)["CreatedDate"].endswith(".000Z") or len(body(create)["CreatedDate"]) == 24

    assert set(header(two_fields)["changedFields"]) == {"Industry", "Rating", "LastModifiedDate"}
    assert set(body(two_fields)) == {"Industry", "Rating", "LastModifiedDate"}
    assert body(two_fields)["Industry"] == "Energy"

    assert body(city) == {"BillingAddress": {"City": "Chicago"}, "LastModifiedDate": body(city)["LastModifiedDate"]}
    assert header(city)["changedFields"] == ["BillingAddress.City", "LastModifiedDate"]

    assert "Phone" in body(nulling) and body(nulling)["Phone"] is None  # CometD: an explicit null, no nulledFields
    assert set(header(nulling)["changedFields"]) == {"Phone", "Description", "LastModifiedDate"}

    assert body(delete) == {} and header(delete)["changedFields"] == []

    current = sf.Account.get(record_id)
    assert body(undelete)["Rating"] == "Hot" and body(undelete)["Description"] == "moved"
    assert "Phone" not in body(undelete)
    assert body(undelete)["BillingAddress"] == {"Street": "1 Main St", "City": "Chicago"}
    assert body(undelete)["LastModifiedDate"] == current["LastModifiedDate"].replace("+0000", "Z")

    stamps = [header(e)["commitTimestamp"] for e in events]
    assert stamps == sorted(set(stamps))
    assert [header(e)["commitNumber"] for e in events] == sorted({header(e)["commitNumber"] for e in events})
    assert [e["data"]["event"]["replayId"] for e in events] == sorted({e["data"]["event"]["replayId"] for e in events})
    assert len({header(e)["transactionKey"] for e in events}) == 6
    assert iso_to_ms(current["SystemModstamp"]) == stamps[-1]
    assert iso_to_ms(body(two_fields)["LastModifiedDate"]) == stamps[1]


def test_contact_name_components_nest_under_name(sf: Salesforce, emulator: Emulator, landed_events):
    record_id = sf.Contact.create({"Salutation": "Ms.", "FirstName": "Ada", "LastName": "Lovelace"})["id"]
    sf.Contact.update(record_id, {"FirstName": "Augusta"})
    create, update = landed_events(emulator)
    assert body(create)["Name"] == {"Salutation": "Ms.", "FirstName": "Ada", "LastName": "Lovelace"}
    assert body(create)["HasOptedOutOfEmail"] is False
    assert body(update)["Name"] == {"FirstName": "Augusta"}
    assert header(update)["changedFields"] == ["Name.FirstName", "LastModifiedDate"]
    assert header(create)["entityName"] == "Contact" and header(create)["recordIds"] == [record_id]


def test_one_update_of_several_records_is_one_event_naming_all(sf: Salesforce, emulator: Emulator, landed_events):
    first = sf.Account.create({"Name": "Globex 1"})["id"]
    second = sf.Account.create({"Name": "Globex 2", "Rating": "Cold"})["id"]
    result = sf.restful(
        "composite/sobjects",
        method="PATCH",
        json={
            "allOrNone": True,
            "records": [
                {"attributes": {"type": "Account"}, "id": first, "Rating": "Hot"},
                {"attributes": {"type": "Account"}, "id": second, "Rating": "Hot"},
            ],
        },
    )
    assert all(r["success"] for r in result)
    update = landed_events(emulator)[-1]
    assert header(update)["recordIds"] == [first, second]
    assert header(update)["changedFields"] == ["Rating", "LastModifiedDate"]


def test_all_or_none_failure_rolls_back_and_sends_nothing(sf: Salesforce, emulator: Emulator, landed_events):
    first = sf.Account.create({"Name": "Keep"})["id"]
    before = len(landed_events(emulator))
    result = sf.restful(
        "composite/sobjects",
        method="PATCH",
        json={
            "allOrNone": True,
            "records": [
                {"attributes": {"type": "Account"}, "id": first, "Rating": "Hot"},
                {"attributes": {"type": "Account"}, "id": first[:3] + "0000000000ZZAAA", "Rating": "Hot"},
            ],
        },
    )
    assert [r["success"] for r in result] == [False, False]
    assert result[0]["errors"][0]["statusCode"] == "ALL_OR_NONE_OPERATION_ROLLED_BACK"
    assert sf.Account.get(first)["Rating"] is None
    assert len(landed_events(emulator)) == before


def test_lead_conversion_is_one_transaction_spanning_objects(sf: Salesforce, emulator: Emulator, landed_events):
    lead = sf.Lead.create({"FirstName": "Grace", "LastName": "Hopper", "Company": "Navy", "City": "Arlington"})["id"]
    response = sf.restful(
        "composite",
        method="POST",
        json={
            "allOrNone": True,
            "compositeRequest": [
                {
                    "method": "POST",
                    "url": "/services/data/v59.0/sobjects/Account",
                    "referenceId": "acct",
                    "body": {"Name": "Navy"},
                },
                {
                    "method": "POST",
                    "url": "/services/data/v59.0/sobjects/Contact",
                    "referenceId": "contact",
                    "body": {"FirstName": "Grace", "LastName": "Hopper", "AccountId": "@{acct.id}"},
                },
                {
                    "method": "POST",
                    "url": "/services/data/v59.0/sobjects/Opportunity",
                    "referenceId": "opp",
                    "body": {
                        "Name": "Navy deal",
                        "StageName": "Prospecting",
                        "CloseDate": "2026-01-31",
                        "AccountId": "@{acct.id}",
                    },
                },
                {
                    "method": "PATCH",
                    "url": f"/services/data/v59.0/sobjects/Lead/{lead}",
                    "referenceId": "lead",
                    "body": {
                        "IsConverted": True,
                        "Status": "Closed - Converted",
                        "ConvertedAccountId": "@{acct.id}",
                        "ConvertedContactId": "@{contact.id}",
                        "ConvertedOpportunityId": "@{opp.id}",
                    },
                },
            ],
        },
    )
    assert [r["httpStatusCode"] for r in response["compositeResponse"]] == [201, 201, 201, 204]
    events = landed_events(emulator)[1:]
    assert [(header(e)["entityName"], header(e)["changeType"]) for e in events] == [
        ("Account", "CREATE"),
        ("Contact", "CREATE"),
        ("Opportunity", "CREATE"),
        ("Lead", "UPDATE"),
    ]
    assert len({header(e)["transactionKey"] for e in events}) == 1
    assert len({header(e)["commitTimestamp"] for e in events}) == 1
    assert [header(e)["sequenceNumber"] for e in events] == [1, 2, 3, 4]
    account_id = response["compositeResponse"][0]["body"]["id"]
    assert body(events[1])["AccountId"] == account_id
    assert body(events[3])["ConvertedAccountId"] == account_id and body(events[3])["IsConverted"] is True
    assert emulator.request_counts()["composite"] == 1


def test_hard_delete_and_formula_changes_send_no_event(sf: Salesforce, emulator: Emulator, landed_events):
    record_id = sf.Account.create({"Name": "Temp", "AnnualRevenue": 10, "NumberOfEmployees": 1})["id"]
    sf.Account.delete(record_id)
    sf.restful(f"sobjects/Account/{record_id}/recycleBin", method="DELETE")
    events = landed_events(emulator)
    assert [header(e)["changeType"] for e in events] == ["CREATE", "DELETE"]
    assert "Account_Score__c" not in body(events[0])


def test_cdc_is_enabled_per_object(tmp_path, landed_events):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", cdc_objects=["Contact"]) as emu:
        with emu.store.transaction() as txn:
            txn.create("Account", {"Name": "not published"})
            txn.create("Contact", {"LastName": "published"})
        events = landed_events(emu)
    assert [header(e)["entityName"] for e in events] == ["Contact"]
    assert header(events[0])["sequenceNumber"] == 2
