"""An org whose schema and field-level security change while it runs, through the APIs Salesforce documents:
the Tooling API's CustomField (POST, GET, PATCH, DELETE) and the PermissionSet / FieldPermissions /
PermissionSetAssignment records, changed by an admin session while the integration user reads (org_setup.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceError

from cdc_subscriber.decode import EventDecoder
from cdc_subscriber.proto import pb, services
from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client

FIELD = "Loyalty_Tier__c"
TEXT_40 = {"type": "Text", "label": "Loyalty Tier", "length": 40}


def add_field(admin: Salesforce, full_name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return admin.restful(
        "tooling/sobjects/CustomField", method="POST", json={"FullName": full_name, "Metadata": metadata}
    )


def grant_read(admin: Salesforce, emu: Emulator, field: str) -> str:
    """A permission set granting read on `field`, assigned to the integration user; returns the FieldPermissions id."""
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    obj = field.partition(".")[0]
    granted = admin.FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": obj, "Field": field, "PermissionsRead": True}
    )["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})
    return granted


def field_names(client: Salesforce, obj: str = "Account") -> set[str]:
    return {f["name"] for f in getattr(client, obj).describe()["fields"]}


def error_of(call) -> dict[str, Any]:
    with pytest.raises(SalesforceError) as err:
        call()
    return err.value.content[0]


def account_events(landed: list[dict[str, Any]], record_id: str) -> list[dict[str, Any]]:
    return [e for e in landed if record_id in e["data"]["payload"]["ChangeEventHeader"]["recordIds"]]


@pytest.fixture
def admin(emulator: Emulator) -> Salesforce:
    return simple_salesforce_client(emulator, token=emulator.admin_token)


def test_a_field_added_through_the_tooling_api_is_hidden_from_the_integration_user_until_granted(
    sf, admin, emulator, landed_events
):
    account = sf.Account.create({"Name": "Acme"})["id"]
    before = account_events(landed_events(emulator), account)[0]["data"]["schema"]

    created = add_field(admin, f"Account.{FIELD}", TEXT_40)
    assert created["id"].startswith("00N") and created["success"] is True and created["errors"] == []
    record = admin.restful(f"tooling/sobjects/CustomField/{created['id']}")
    assert (record["TableEnumOrId"], record["DeveloperName"], record["FullName"]) == (
        "Account",
        "Loyalty_Tier",
        f"Account.{FIELD}",
    )
    assert record["Metadata"]["length"] == 40

    # Visible to the admin, not yet to the integration user: describe, SOQL, REST and the change events agree.
    assert FIELD in field_names(admin) and FIELD not in field_names(sf)
    admin.Account.update(account, {FIELD: "Gold"})
    assert admin.query(f"SELECT {FIELD} FROM Account")["records"][0][FIELD] == "Gold"
    refused = error_of(lambda: sf.query(f"SELECT Id, {FIELD} FROM Account"))
    assert refused["errorCode"] == "INVALID_FIELD"
    assert f"No such column '{FIELD}' on entity 'Account'" in refused["message"]
    assert FIELD not in sf.Account.get(account)
    assert error_of(lambda: sf.Account.update(account, {FIELD: "Silver"}))["errorCode"] == "INVALID_FIELD"
    hidden_update = account_events(landed_events(emulator), account)[-1]
    assert hidden_update["data"]["schema"] != before, "a new field list: a new schema id"
    assert FIELD not in hidden_update["data"]["payload"]
    assert FIELD not in hidden_update["data"]["payload"]["ChangeEventHeader"]["changedFields"]

    grant_read(admin, emulator, f"Account.{FIELD}")
    assert FIELD in field_names(sf)
    assert sf.query(f"SELECT {FIELD} FROM Account WHERE Id = '{account}'")["records"][0][FIELD] == "Gold"
    assert sf.Account.get(account)[FIELD] == "Gold"
    pages = list(sf.bulk2.Account.query(f"SELECT Id, {FIELD} FROM Account", wait=0.05))
    assert f'"{FIELD}"' in pages[0].splitlines()[0] and '"Gold"' in pages[0]
    admin.Account.update(account, {FIELD: "Platinum"})
    seen = account_events(landed_events(emulator), account)[-1]["data"]["payload"]
    assert seen[FIELD] == "Platinum" and FIELD in seen["ChangeEventHeader"]["changedFields"]


def test_revoking_read_access_hides_the_field_and_deletes_the_permission_record(sf, admin, emulator, landed_events):
    add_field(admin, f"Account.{FIELD}", TEXT_40)
    granted = grant_read(admin, emulator, f"Account.{FIELD}")
    account = admin.Account.create({"Name": "Acme", FIELD: "Gold"})["id"]
    assert sf.Account.get(account)[FIELD] == "Gold"

    # "A FieldPermissions record must have at minimum PermissionsRead set to true, or it will be deleted."
    admin.FieldPermissions.update(granted, {"PermissionsRead": False})
    assert admin.query(f"SELECT Id FROM FieldPermissions WHERE Field = 'Account.{FIELD}'")["totalSize"] == 0
    assert FIELD not in field_names(sf) and FIELD not in sf.Account.get(account)
    admin.Account.update(account, {FIELD: "Silver", "Phone": "555"})
    payload = account_events(landed_events(emulator), account)[-1]["data"]["payload"]
    assert payload["Phone"] == "555" and FIELD not in payload


def test_only_the_admin_changes_fields_and_permissions_and_the_org_checks_what_it_is_given(sf, admin, emulator):
    assert (
        error_of(lambda: add_field(sf, f"Account.{FIELD}", TEXT_40))["errorCode"] == "INSUFFICIENT_ACCESS_OR_READONLY"
    )
    assert error_of(lambda: add_field(admin, "Account.Tier", TEXT_40))["errorCode"] == "FIELD_INTEGRITY_EXCEPTION"
    too_long = {**TEXT_40, "length": 256}
    assert error_of(lambda: add_field(admin, f"Account.{FIELD}", too_long))["fields"] == ["length"]
    no_scale = {"type": "Number", "label": "Score", "precision": 8}
    assert error_of(lambda: add_field(admin, "Account.Score__c", no_scale))["fields"] == ["scale"]
    add_field(admin, f"Account.{FIELD}", TEXT_40)
    assert error_of(lambda: add_field(admin, f"Account.{FIELD}", TEXT_40))["errorCode"] == "DUPLICATE_DEVELOPER_NAME"
    assert error_of(lambda: add_field(admin, "Phone.X__c", TEXT_40))["errorCode"] == "NOT_FOUND"

    permission_set = admin.PermissionSet.create({"Name": "P", "Label": "P"})["id"]
    edit_only = {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}"}
    refused = error_of(lambda: admin.FieldPermissions.create({**edit_only, "PermissionsEdit": True}))
    assert refused["errorCode"] == "FIELD_INTEGRITY_EXCEPTION"
    unknown = {**edit_only, "Field": "Account.Nope__c", "PermissionsRead": True}
    assert error_of(lambda: admin.FieldPermissions.create(unknown))["errorCode"] == (
        "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST"
    )
    as_integration = error_of(lambda: sf.PermissionSet.create({"Name": "Q", "Label": "Q"}))
    assert as_integration["errorCode"] == "INSUFFICIENT_ACCESS_OR_READONLY"


def test_a_deleted_field_leaves_every_api_and_soql_naming_it_fails(sf, admin, emulator, landed_events):
    field_id = add_field(admin, f"Account.{FIELD}", TEXT_40)["id"]
    grant_read(admin, emulator, f"Account.{FIELD}")
    account = sf.Account.create({"Name": "Acme", FIELD: "Gold"})["id"]
    with_field = account_events(landed_events(emulator), account)[-1]["data"]["schema"]

    assert admin.restful(f"tooling/sobjects/CustomField/{field_id}", method="DELETE") is None
    for client in (sf, admin):
        assert FIELD not in field_names(client)
        refused = error_of(lambda client=client: client.query(f"SELECT Id, {FIELD} FROM Account"))
        assert refused["errorCode"] == "INVALID_FIELD" and f"No such column '{FIELD}'" in refused["message"]
    assert error_of(lambda: admin.restful(f"tooling/sobjects/CustomField/{field_id}"))["errorCode"] == "NOT_FOUND"
    assert sf.query("SELECT Id FROM FieldPermissions")["totalSize"] == 0, "its permissions went with it"
    sf.Account.update(account, {"Phone": "555"})
    after = account_events(landed_events(emulator), account)[-1]["data"]
    assert after["schema"] != with_field and FIELD not in after["payload"]


def test_a_patch_changes_a_fields_type_length_and_precision_as_describe_then_shows(sf, admin, emulator):
    text = add_field(admin, "Account.Code__c", {"type": "Text", "label": "Code", "length": 40})["id"]
    number = add_field(admin, "Account.Score__c", {"type": "Number", "label": "Score", "precision": 8, "scale": 2})[
        "id"
    ]
    pick = {"valueSet": {"valueSetDefinition": {"value": [{"fullName": "A"}, {"fullName": "B"}]}}}
    choice = add_field(admin, "Account.Choice__c", {"type": "Picklist", "label": "Choice", **pick})["id"]
    account = admin.Account.create({"Name": "Acme", "Code__c": "x" * 40, "Score__c": 12.34})["id"]

    def described() -> dict[str, dict[str, Any]]:
        return {f["name"]: f for f in admin.Account.describe()["fields"]}

    assert described()["Code__c"]["length"] == 40
    assert (described()["Score__c"]["precision"], described()["Score__c"]["scale"]) == (8, 2)
    url = "tooling/sobjects/CustomField/"
    admin.restful(url + text, method="PATCH", json={"Metadata": {"type": "Text", "label": "Code", "length": 255}})
    admin.restful(url + number, method="PATCH", json={"Metadata": {"precision": 16, "scale": 4}})
    admin.restful(url + choice, method="PATCH", json={"Metadata": {"type": "MultiselectPicklist", **pick}})
    now = described()
    assert now["Code__c"]["length"] == 255
    assert (now["Score__c"]["type"], now["Score__c"]["precision"], now["Score__c"]["scale"]) == ("double", 16, 4)
    assert now["Choice__c"]["type"] == "multipicklist"
    assert [v["value"] for v in now["Choice__c"]["picklistValues"]] == ["A", "B"]
    admin.Account.update(account, {"Code__c": "y" * 255})
    assert admin.Account.get(account)["Code__c"] == "y" * 255

    admin.restful(url + number, method="PATCH", json={"Metadata": {"type": "Text", "label": "Score", "length": 20}})
    assert described()["Score__c"]["type"] == "string"
    assert admin.Account.get(account)["Score__c"] == "12.34", "the org converts a number to its text"


def test_a_whole_number_becomes_its_text_without_a_decimal_point_when_the_field_turns_text(admin):
    number = add_field(admin, "Account.Rank__c", {"type": "Number", "label": "Rank", "precision": 3, "scale": 0})["id"]
    whole, half = (admin.Account.create({"Name": n, "Rank__c": v})["id"] for n, v in (("A", 12), ("B", 7.5)))
    admin.restful(
        f"tooling/sobjects/CustomField/{number}", method="PATCH", json={"Metadata": {"type": "Text", "length": 20}}
    )
    assert [admin.Account.get(i)["Rank__c"] for i in (whole, half)] == ["12", "7.5"]


def test_a_deleted_fields_name_is_free_and_a_new_field_under_it_starts_with_no_values(sf, admin, emulator):
    field_id = add_field(admin, f"Account.{FIELD}", TEXT_40)["id"]
    grant_read(admin, emulator, f"Account.{FIELD}")
    account = admin.Account.create({"Name": "Acme", FIELD: "Gold"})["id"]
    admin.restful(f"tooling/sobjects/CustomField/{field_id}", method="DELETE")
    renamed = emulator.store.select("SELECT name FROM _custom_fields WHERE Id = ?", (field_id,))
    assert renamed[0]["name"] == "Loyalty_Tier_del__c", "Salesforce appends _del to a deleted field's name"

    again = add_field(admin, f"Account.{FIELD}", {"type": "Number", "label": "Tier", "precision": 6, "scale": 1})
    assert again["id"] != field_id
    assert admin.Account.get(account)[FIELD] is None, "the old field's value is not the new field's"
    assert {f["name"]: f["type"] for f in admin.Account.describe()["fields"]}[FIELD] == "double"


def test_collections_and_composite_writes_apply_field_level_security_as_single_writes_do(sf, admin, emulator):
    add_field(admin, f"Account.{FIELD}", TEXT_40)  # no read access for the integration user
    account = sf.Account.create({"Name": "Acme"})["id"]
    single = error_of(lambda: sf.Account.update(account, {FIELD: "Gold"}))
    assert single["errorCode"] == "INVALID_FIELD"
    records = [{"attributes": {"type": "Account"}, "id": account, FIELD: "Gold"}]
    updated = sf.restful("composite/sobjects", method="PATCH", json={"allOrNone": False, "records": records})
    created = sf.restful(
        "composite/sobjects",
        method="POST",
        json={"allOrNone": False, "records": [{"attributes": {"type": "Account"}, "Name": "B", FIELD: "Gold"}]},
    )
    assert [r["errors"][0]["statusCode"] for r in (*updated, *created)] == ["INVALID_FIELD", "INVALID_FIELD"]
    composite = sf.restful(
        "composite",
        method="POST",
        json={
            "compositeRequest": [
                {
                    "method": "PATCH",
                    "url": f"/services/data/v62.0/sobjects/Account/{account}",
                    "referenceId": "u",
                    "body": {FIELD: "Gold"},
                }
            ]
        },
    )
    assert composite["compositeResponse"][0]["httpStatusCode"] == 400
    assert emulator.store.get_row("Account", account)[FIELD] is None, "no write reached the record"
    # The admin reads every field: the same calls succeed as the admin.
    assert admin.restful("composite/sobjects", method="PATCH", json={"records": records})[0]["success"]
    assert emulator.store.get_row("Account", account)[FIELD] == "Gold"


def _decoded(emu: Emulator, stub: services.PubSubStub) -> list[dict[str, Any]]:
    metadata = (("accesstoken", emu.token), ("instanceurl", emu.instance_url), ("tenantid", emu.tenant_id))
    request = pb.FetchRequest(
        topic_name="/data/AccountChangeEvent", replay_preset=pb.ReplayPreset.Value("EARLIEST"), num_requested=100
    )
    stream = stub.Subscribe(iter([request]), metadata=metadata)
    response = next(stream)
    stream.cancel()

    def schema(schema_id: str) -> str:
        return stub.GetSchema(pb.SchemaRequest(schema_id=schema_id), metadata=metadata).schema_json

    decoder = EventDecoder(schema, lambda entity: {f["name"]: f["type"] for f in emu.store.describe(entity)["fields"]})
    return [decoder.decode(event, "/data/AccountChangeEvent") for event in response.events]


def test_pub_sub_events_keep_the_schema_they_were_published_with_and_get_schema_lists_hidden_fields(tmp_path: Path):
    with Emulator(tmp_path / "org", pubsub=True) as emu:
        sf, admin = simple_salesforce_client(emu), simple_salesforce_client(emu, token=emu.admin_token)
        channel = grpc.secure_channel(emu.pubsub_address, grpc.ssl_channel_credentials(Path(emu.ca_file).read_bytes()))
        stub = services.PubSubStub(channel)
        metadata = (("accesstoken", emu.token), ("instanceurl", emu.instance_url), ("tenantid", emu.tenant_id))
        first = sf.Account.create({"Name": "Before"})["id"]
        add_field(admin, f"Account.{FIELD}", TEXT_40)
        hidden = admin.Account.create({"Name": "Hidden", FIELD: "Gold"})["id"]
        grant_read(admin, emu, f"Account.{FIELD}")
        shown = admin.Account.create({"Name": "Shown", FIELD: "Silver"})["id"]

        events = {e["data"]["payload"]["ChangeEventHeader"]["recordIds"][0]: e["data"] for e in _decoded(emu, stub)}
        assert FIELD not in events[hidden]["payload"] and events[shown]["payload"][FIELD] == "Silver"
        assert events[first]["schema"] != events[hidden]["schema"] == events[shown]["schema"]
        schemas = {
            record: json.loads(stub.GetSchema(pb.SchemaRequest(schema_id=e["schema"]), metadata=metadata).schema_json)
            for record, e in events.items()
        }
        assert FIELD not in {f["name"] for f in schemas[first]["fields"]}, "the earlier schema is still served"
        assert FIELD in {f["name"] for f in schemas[hidden]["fields"]}, "GetSchema lists fields the user cannot read"
        channel.close()

    with Emulator(tmp_path / "org", pubsub=True) as emu:  # a restart keeps the fields and every schema version
        channel = grpc.secure_channel(emu.pubsub_address, grpc.ssl_channel_credentials(Path(emu.ca_file).read_bytes()))
        stub = services.PubSubStub(channel)
        again = {e["data"]["payload"]["ChangeEventHeader"]["recordIds"][0]: e["data"] for e in _decoded(emu, stub)}
        assert again[shown]["payload"][FIELD] == "Silver" and again[first]["schema"] == events[first]["schema"]
        assert FIELD in field_names(simple_salesforce_client(emu))
        channel.close()


def test_the_rest_event_schema_lists_every_field_and_keeps_earlier_schema_ids(sf, admin, emulator, landed_events):
    account = sf.Account.create({"Name": "Before"})["id"]
    before = account_events(landed_events(emulator), account)[0]["data"]["schema"]
    add_field(admin, f"Account.{FIELD}", TEXT_40)  # not granted: the integration user cannot read it

    current = sf.restful("sobjects/AccountChangeEvent/eventSchema", params={"payloadFormat": "COMPACT"})
    assert current["name"] == "AccountChangeEvent" and current["uuid"] != before
    assert FIELD in {f["name"] for f in current["fields"]}, "the event schema lists fields the user cannot read"
    earlier = sf.restful(f"event/eventSchema/{before}")
    assert earlier["uuid"] == before and FIELD not in {f["name"] for f in earlier["fields"]}
    assert sf.restful(f"event/eventSchema/{current['uuid']}") == current
    assert error_of(lambda: sf.restful("sobjects/AccountHistoryChangeEvent/eventSchema"))["errorCode"] == "NOT_FOUND"
