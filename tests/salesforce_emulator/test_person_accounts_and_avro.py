"""Shapes a real org sends that the emulator makes by default: person accounts (Account.Name a union), a time
field, Salesforce's Avro schema conventions, and long text diffs over the Pub/Sub API."""

from __future__ import annotations

import json

import pytest
from simple_salesforce import SalesforceMalformedRequest

from cdc_subscriber.decode import EventDecoder
from cdc_subscriber.proto import int_to_replay, pb
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.pubsub_avro import avro_schema, encode_event, entity_for_schema, schema_id, schema_json
from salesforce_emulator.store import Store
from salesforce_emulator.testing import header
from salesforce_emulator.workload import Workload


def test_a_person_accounts_name_is_derived_and_rest_returns_it_beside_its_parts(sf, emulator, landed_events):
    person = sf.Account.create(
        {
            "IsPersonAccount": True,
            "FirstName": "Ada",
            "LastName": "Lovelace",
            "Salutation": "Ms.",
            "PersonEmail": "ada@example.net",
        }
    )["id"]
    business = sf.Account.create({"Name": "Acme"})["id"]
    sf.Account.update(person, {"MiddleName": "King"})
    got = sf.Account.get(person)
    assert (got["Name"], got["FirstName"], got["LastName"], got["IsPersonAccount"]) == (
        "Ada King Lovelace",
        "Ada",
        "Lovelace",
        True,
    )
    assert sf.Account.get(business)["Name"] == "Acme" and sf.Account.get(business)["FirstName"] is None
    describe = sf.Account.describe()["fields"]
    assert {f["name"] for f in describe if f["compoundFieldName"] == "Name"} == {
        "Salutation",
        "FirstName",
        "LastName",
        "MiddleName",
        "Suffix",
    }
    payloads = [e["data"]["payload"] for e in landed_events(emulator)]
    created, _, updated = payloads
    assert created["Name"] == {"Salutation": "Ms.", "FirstName": "Ada", "LastName": "Lovelace"}  # the record
    assert payloads[1]["Name"] == "Acme"  # a business account's text
    assert updated["Name"] == {"MiddleName": "King"}
    assert updated["ChangeEventHeader"]["changedFields"][:1] == ["Name.MiddleName"]


def test_a_time_field_is_hh_mm_ss_sss_z_in_rest_bulk_and_events(sf, emulator, landed_events):
    contact = sf.Contact.create({"LastName": "Hopper", "Best_Time_To_Call__c": "08:30"})["id"]
    assert sf.Contact.get(contact)["Best_Time_To_Call__c"] == "08:30:00.000Z"
    pages = list(sf.bulk2.Contact.query("SELECT Id, Best_Time_To_Call__c FROM Contact", wait=0.05))
    assert '"08:30:00.000Z"' in pages[0]
    assert landed_events(emulator)[0]["data"]["payload"]["Best_Time_To_Call__c"] == "08:30:00.000Z"
    with pytest.raises(SalesforceMalformedRequest):
        sf.Contact.update(contact, {"Best_Time_To_Call__c": "8:30 AM"})


def test_change_event_schemas_follow_salesforce_conventions():
    account = avro_schema("Account")
    fields = {f["name"]: f for f in account["fields"][1:]}
    for fld in fields.values():
        assert fld["type"][0] == "null" and fld["default"] is None and ":" in fld["doc"], fld["name"]
    assert fields["Name"]["doc"] == "Data:Switchable_PersonName"
    assert fields["Name"]["type"][1] == "string" and fields["Name"]["type"][2]["name"] == "Switchable_PersonName"
    assert fields["BillingAddress"]["type"][1]["name"] == "Address"  # defined once ...
    assert fields["ShippingAddress"]["type"][1] == "com.sforce.eventbus.Address"  # ... and referred to by name
    assert (fields["PersonBirthdate"]["type"], fields["PersonBirthdate"]["doc"]) == (["null", "long"], "Data:DateOnly")
    assert (fields["CreatedDate"]["type"], fields["CreatedDate"]["doc"]) == (["null", "long"], "CreatedDate:DateTime")
    contact = {f["name"]: f for f in avro_schema("Contact")["fields"][1:]}
    assert contact["Best_Time_To_Call__c"]["type"] == ["null", "long"]
    assert contact["Best_Time_To_Call__c"]["doc"].startswith("Data:TimeOnly:00N")
    assert FaultConfig().diff_over_chars == 1000  # Salesforce's own threshold, on by default


def test_every_event_of_a_busy_org_encodes_to_avro_and_decodes_back_to_the_same_cometd_event(tmp_path):
    """Person accounts, time fields and long text diffs (on by default) included: the Pub/Sub path and the file
    path carry the same events."""
    with Emulator(tmp_path / "org", pubsub=True) as emu:
        workload = Workload(emu, seed=3, long_text=True)
        workload.build_org(accounts=10)
        workload.run(changes=300)
        events = [json.loads(e.line) for e in emu.events.read(0, emu.events.tip, None, 100_000)]
        decoder = EventDecoder(
            lambda sid: schema_json(entity_for_schema(sid)),
            lambda entity: {f["name"]: f["type"] for f in emu.store.describe(entity)["fields"]},
        )
        for number, event in enumerate(events):
            schema, payload = encode_event(event)
            consumer = pb.ConsumerEvent(
                event=pb.ProducerEvent(schema_id=schema, payload=payload), replay_id=int_to_replay(number + 1)
            )
            assert decoder.decode(consumer, event["channel"])["data"] == event["data"] | {
                "event": {"replayId": number + 1}
            }
    payloads = [e["data"]["payload"] for e in events]
    headers = [p["ChangeEventHeader"] for p in payloads]
    assert any(h["diffFields"] for h in headers), "a long text diff"
    assert any(h["entityName"] == "Account" and isinstance(p.get("Name"), dict) for h, p in zip(headers, payloads))
    assert any(h["entityName"] == "Account" and isinstance(p.get("Name"), str) for h, p in zip(headers, payloads))
    assert any(p.get("Best_Time_To_Call__c") for p in payloads), "a time value"


def test_an_eastern_order_org_puts_a_persons_last_name_first_and_renames_follow(tmp_path):
    store = Store(tmp_path / "org.sqlite", name_order="eastern")
    with store.transaction() as txn:
        person = txn.create("Account", {"IsPersonAccount": True, "FirstName": "Ada", "LastName": "Lovelace"})
    assert store.get_row("Account", person)["Name"] == "Lovelace Ada"
    with store.transaction() as txn:
        txn.update("Account", person, {"LastName": "King", "MiddleName": "Byron"})
    assert store.get_row("Account", person)["Name"] == "King Ada Byron"
    with pytest.raises(ValueError, match="name_order"):
        Store(tmp_path / "other.sqlite", name_order="alphabetical")


def test_an_org_without_person_accounts_describes_sends_and_encodes_account_name_as_its_own_text(
    tmp_path, landed_events
):
    """`person_accounts=False`: Account as a real org without person accounts describes it (Name its own compound
    parent, `extraTypeInfo` switchablepersonname, createable; no name parts, no Person* fields), Name plain text in
    REST, SOQL, change events and the Pub/Sub schema; the org keeps its kind across restarts."""
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", pubsub=True, person_accounts=False) as emu:
        sf = simple_salesforce_client(emu)
        fields = {f["name"]: f for f in sf.Account.describe()["fields"]}
        name = fields["Name"]
        assert (name["compoundFieldName"], name["extraTypeInfo"], name["createable"], name["updateable"]) == (
            "Name",
            "switchablepersonname",
            True,
            True,
        )
        assert (name["type"], name["length"], name["nillable"], name["label"]) == ("string", 255, False, "Account Name")
        assert not [f for f in fields if f in {"FirstName", "LastName", "IsPersonAccount"} or f.startswith("Person")]
        acme = sf.Account.create({"Name": "Acme"})["id"]
        sf.Account.update(acme, {"Name": "Acme Corp", "Phone": "555-0100"})
        with pytest.raises(SalesforceMalformedRequest):
            sf.Account.create({"LastName": "Lovelace"})
        assert sf.query(f"SELECT Name FROM Account WHERE Id = '{acme}'")["records"][0]["Name"] == "Acme Corp"
        created, renamed = [e["data"]["payload"] for e in landed_events(emu)]
        assert created["Name"] == "Acme" and renamed["Name"] == "Acme Corp"
        assert renamed["ChangeEventHeader"]["changedFields"][:2] == ["Name", "Phone"]
        schema = {f["name"]: f for f in avro_schema(emu.store.by_name["Account"])["fields"][1:]}
        assert (schema["Name"]["type"], schema["Name"]["doc"]) == (["null", "string"], "Data:Text")
        assert emu.store.by_name["Account"].schema_id != schema_id("Account")  # not the person-account org's
        workload = Workload(emu, seed=4)
        workload.build_org(accounts=5)
        workload.run(changes=50)
        assert not workload.person_accounts
        accounts = [e["data"]["payload"] for e in landed_events(emu) if header(e)["entityName"] == "Account"]
        assert len(accounts) > 5 and all(isinstance(p.get("Name", ""), str) for p in accounts)
    with Emulator(tmp_path / "org") as again:
        assert not again.store.person_accounts
    with pytest.raises(ValueError, match="without person accounts"):
        Emulator(tmp_path / "org", person_accounts=True)
