"""Decoding cases Salesforce sends that the emulator's events do not: diff fields, a compound nulled as a whole,
dates as epoch milliseconds."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from cdc_subscriber.bitmap import encode
from cdc_subscriber.decode import EventDecoder
from cdc_subscriber.proto import int_to_replay, pb
from salesforce_emulator.pubsub_avro import schema_json

# The emulator's Contact schema, but Birthdate a long: an org may send dates as epoch milliseconds.
SCHEMA = json.loads(schema_json("Contact"))
next(f for f in SCHEMA["fields"] if f["name"] == "Birthdate")["type"] = ["null", "long"]
TYPES = {"Birthdate": "date", "LastModifiedDate": "datetime", "Description": "textarea", "Title": "string"}


def consumer_event(changed: list[str], nulled: list[str], diff: list[str], **values) -> pb.ConsumerEvent:
    header = {
        "entityName": "Contact",
        "recordIds": ["003000000000001AAA"],
        "changeType": "UPDATE",
        "changeOrigin": "",
        "transactionKey": "t",
        "sequenceNumber": 1,
        "commitTimestamp": 1_700_000_000_000,
        "commitNumber": 1,
        "commitUser": "005000000000001AAA",
        "changedFields": changed,
        "nulledFields": nulled,
        "diffFields": diff,
    }
    record = {f["name"]: None for f in SCHEMA["fields"]} | {"ChangeEventHeader": header} | values
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return pb.ConsumerEvent(event=pb.ProducerEvent(schema_id="s", payload=out.getvalue()), replay_id=int_to_replay(9))


def decode(event: pb.ConsumerEvent) -> dict:
    decoder = EventDecoder(lambda _: json.dumps(SCHEMA), lambda _: TYPES)
    return decoder.decode(event, "/data/ContactChangeEvent")["data"]["payload"]


def test_a_compound_nulled_as_a_whole_nulls_each_component():
    nulled = ["0x" + f"{1 << [f['name'] for f in SCHEMA['fields']].index('Name'):X}"]  # the top-level bit only
    payload = decode(consumer_event(encode(["Title"], SCHEMA), nulled, [], Title="CEO"))
    assert payload["Title"] == "CEO"
    assert payload["Name"] == {"Salutation": None, "FirstName": None, "LastName": None}
    assert payload["ChangeEventHeader"]["nulledFields"] == ["Name.Salutation", "Name.FirstName", "Name.LastName"]


def test_a_diff_field_arrives_as_a_diff_object_and_dates_in_milliseconds_become_dates():
    diff = "--- a\n+++ b sha256=...\n@@ -1 +1 @@\n-x\n+y\n"
    event = consumer_event(
        encode(["Birthdate", "LastModifiedDate"], SCHEMA),
        [],
        encode(["Title"], SCHEMA),
        Birthdate=1_700_000_000_000,
        LastModifiedDate=1_700_000_000_123,
        Title=diff,
    )
    payload = decode(event)
    assert payload["Birthdate"] == "2023-11-14" and payload["LastModifiedDate"] == "2023-11-14T22:13:20.123Z"
    assert payload["Title"] == {"diff": diff}
    assert payload["ChangeEventHeader"]["diffFields"] == ["Title"]


# The emulator's Account schema: a person-account org's Name is ["null", "string", Switchable_PersonName].
ACCOUNT = json.loads(schema_json("Account"))
ACCOUNT_TYPES = {"Name": "string", "Description": "textarea", "PersonBirthdate": "date", "LastModifiedDate": "datetime"}


def account_event(change_type: str, changed: list[str], diff: list[str] = (), **values) -> pb.ConsumerEvent:
    header = {
        "entityName": "Account",
        "recordIds": ["001000000000001AAA"],
        "changeType": change_type,
        "changeOrigin": "",
        "transactionKey": "t",
        "sequenceNumber": 1,
        "commitTimestamp": 1_700_000_000_000,
        "commitNumber": 1,
        "commitUser": "005000000000001AAA",
        "changedFields": encode(changed, ACCOUNT),
        "nulledFields": [],
        "diffFields": encode(list(diff), ACCOUNT),
    }
    record = {f["name"]: None for f in ACCOUNT["fields"]} | {"ChangeEventHeader": header} | values
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ACCOUNT), record)
    return pb.ConsumerEvent(event=pb.ProducerEvent(schema_id="s", payload=out.getvalue()), replay_id=int_to_replay(9))


def decode_account(event: pb.ConsumerEvent) -> dict:
    decoder = EventDecoder(lambda _: json.dumps(ACCOUNT), lambda _: ACCOUNT_TYPES)
    return decoder.decode(event, "/data/AccountChangeEvent")["data"]["payload"]


def test_the_account_name_union_decodes_by_what_each_value_is():
    business = decode_account(account_event("UPDATE", ["Name"], Name="Acme Corp"))
    assert business["Name"] == "Acme Corp" and business["ChangeEventHeader"]["changedFields"] == ["Name"]
    person = decode_account(account_event("UPDATE", ["Name.LastName"], Name={"LastName": "King"}))
    assert person["Name"] == {"LastName": "King"}
    assert person["ChangeEventHeader"]["changedFields"] == ["Name.LastName"]
    created = decode_account(account_event("CREATE", [], Name={"FirstName": "Ada", "LastName": "Lovelace"}))
    assert created["Name"] == {"FirstName": "Ada", "LastName": "Lovelace"}


def test_a_person_name_component_of_a_business_account_text_is_absent_not_a_crash():
    # the union holds text while the bitmap names a component: the component was not sent
    payload = decode_account(account_event("UPDATE", ["Name.LastName"], Name="Acme Corp"))
    assert payload["Name"] == {"LastName": None}


def test_a_time_arrives_as_milliseconds_since_midnight_and_lands_as_salesforce_text():
    contact = json.loads(schema_json("Contact"))
    assert next(f for f in contact["fields"] if f["name"] == "Best_Time_To_Call__c")["doc"].startswith("Data:TimeOnly")
    event = consumer_event(encode(["Best_Time_To_Call__c"], SCHEMA), [], [], Best_Time_To_Call__c=30_600_250)
    decoder = EventDecoder(lambda _: json.dumps(SCHEMA), lambda _: TYPES | {"Best_Time_To_Call__c": "time"})
    assert decoder.decode(event, "c")["data"]["payload"]["Best_Time_To_Call__c"] == "08:30:00.250Z"


def test_a_diff_over_the_pubsub_api_is_the_fields_text_and_lands_as_a_diff_object():
    diff = "--- \n+++ " + "a" * 64 + "\n@@ -2,1 +2,1 @@\n-old\n+new"
    payload = decode_account(
        account_event(
            "UPDATE",
            ["Description", "LastModifiedDate"],
            ["Description"],
            Description=diff,
            LastModifiedDate=1_700_000_000_000,
        )
    )
    assert payload["Description"] == {"diff": diff}
    assert payload["ChangeEventHeader"]["diffFields"] == ["Description"]
    assert payload["LastModifiedDate"] == "2023-11-14T22:13:20.000Z"


def test_a_date_is_read_from_epoch_days_or_epoch_milliseconds_of_its_midnight():
    from cdc_subscriber.decode import iso_date

    assert iso_date(20_414) == iso_date(20_414 * 86_400_000) == "2025-11-22"
    assert iso_date(-1) == iso_date(-86_400_000) == "1969-12-31"


def test_a_header_that_decodes_but_cannot_be_landed_is_refused_before_describe_is_asked():
    from cdc_subscriber.header import InvalidHeader

    asked: list[str] = []
    decoder = EventDecoder(lambda _: json.dumps(ACCOUNT), lambda entity: asked.append(entity) or ACCOUNT_TYPES)
    for spoiled, named in [
        ({"commitTimestamp": 1_700_000_000_000 * 1_000_000}, "commitTimestamp"),
        ({"commitTimestamp": 1_700_000_000}, "commitTimestamp"),  # seconds
        ({"entityName": "../../etc/" + "x" * 300}, "entityName"),
        ({"entityName": "Account\n"}, "entityName"),
    ]:
        event = account_event("UPDATE", ["Name"], Name="Acme")
        record = fastavro.schemaless_reader(io.BytesIO(event.event.payload), fastavro.parse_schema(ACCOUNT), None)
        record["ChangeEventHeader"] |= spoiled
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(ACCOUNT), record)
        event.event.payload = out.getvalue()
        with pytest.raises(InvalidHeader, match=named) as refused:
            decoder.decode(event, "/data/AccountChangeEvent")
        assert len(str(refused.value)) < 300 and "\n" not in str(refused.value)  # the value is cut and escaped
    assert asked == []
