"""A replicated field hidden by field-level security, or deleted, while the platform runs (replication/field_access.py):
the org changed by its admin through the Tooling API and FieldPermissions records of the real HTTPS emulator, the
platform run through Dagster's real materialize() and its sensors."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from harness import Platform
from org_compare import differences
from poll.poll_harness import poll_platform, run_replicas
from settings import TEST_SPARK_CONF
from simple_salesforce import Salesforce
from test_sync import catch_up, make_platform, resource, run_sensor_requests

from cdc_assets.assets import replica_key
from cdc_assets.checks import FIELDS_READABLE, SCHEMA, UNIQUE_ID
from cdc_assets.history.checks import HISTORY_MATCHES_REPLICA
from replication.history.stage import history_name
from replication.schemas import FIELD_ACCESS_PROPERTY, field_marks, keep_describe, marked_fields
from resources.delta import read_table
from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.describe import SENSOR_NAME as DESCRIBE_SENSOR
from sensors.work import mode_run_config

FIELD = "Loyalty_Tier__c"


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def admin_of(emu: Emulator) -> Salesforce:
    return simple_salesforce_client(emu, token=emu.admin_token)


def add_readable_field(emu: Emulator) -> tuple[str, str]:
    """The admin adds Account.Loyalty_Tier__c and grants the integration user read access: (field id, the
    FieldPermissions id)."""
    admin = admin_of(emu)
    field_id = admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={"FullName": f"Account.{FIELD}", "Metadata": {"type": "Text", "label": "Loyalty Tier", "length": 40}},
    )["id"]
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    granted = admin.FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}", "PermissionsRead": True}
    )["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})
    return field_id, granted


def set_tiers(emu: Emulator, values: dict[str, Any]) -> None:
    with emu.store.transaction(user_id=emu.store.admin_user_id) as txn:
        for record_id, value in values.items():
            txn.update("Account", record_id, {FIELD: value})


def loaded(tmp_path, emu: Emulator) -> tuple[Platform, list[str]]:
    Workload(emu, seed=5).build_org(accounts=6)
    ids = emu.store.ids("Account")[:4]
    set_tiers(emu, {record_id: f"Tier {n}" for n, record_id in enumerate(ids)})
    platform = make_platform(tmp_path, emu, objects=["Account"])
    assert platform.run().success  # the initial load, with the field
    assert [platform.rows("Account")[i][FIELD] for i in ids] == ["Tier 0", "Tier 1", "Tier 2", "Tier 3"]
    return platform, ids


def dirty_by_a_gap(emu: Emulator, record_id: str) -> None:
    """An update that reaches the platform as a gap event: its record is reconciled (read by id from the org)."""
    emu.set_faults(gap_fraction=1.0)
    with emu.store.transaction() as txn:
        txn.update("Account", record_id, {"Phone": "555 0100"})
    emu.set_faults(gap_fraction=0.0)


def readable_check(platform: Platform) -> dg.AssetCheckEvaluation:
    """A run of the replica with its checks: the table, kept columns and all, passes the blocking ones."""
    request = dg.RunRequest(asset_selection=[replica_key("Account")], run_config=mode_run_config({"Account": "apply"}))
    result = platform.execute(request, checks=True)
    checks = platform.check_results(result, "Account")
    assert result.success and checks[SCHEMA].passed and checks[UNIQUE_ID].passed
    return checks[FIELDS_READABLE]


def test_a_field_hidden_by_field_level_security_is_never_nulled_fails_a_check_and_is_backfilled_when_read_returns(
    tmp_path, org
):
    _, granted = add_readable_field(org)
    platform, ids = loaded(tmp_path, org)

    admin_of(org).FieldPermissions.update(granted, {"PermissionsRead": False})  # hidden from the integration user
    set_tiers(org, {ids[0]: "Changed while hidden"})
    with org.store.transaction() as txn:
        txn.update("Account", ids[1], {"Phone": "555 0101"})
    dirty_by_a_gap(org, ids[2])
    result = catch_up(platform, org)
    assert result.success
    assert platform.rows("Account")[ids[2]]["_sf_dirty_since"] is not None
    assert [r.tags["cdc/mode"] for r in run_sensor_requests(platform)] == ["reconcile"]  # reads ids[2] by id
    rows = platform.rows("Account")
    assert rows[ids[2]]["_sf_dirty_since"] is None and rows[ids[2]]["Phone"] == "555 0100"
    # Nothing nulled: the reconcile did not ask for the field (the org refuses it) and wrote no null over it.
    assert [rows[i][FIELD] for i in ids] == ["Tier 0", "Tier 1", "Tier 2", "Tier 3"]
    mark = marked_fields(platform.delta_table("Account"))[FIELD]
    assert mark["status"] == "hidden" and mark["type"] == "string"
    assert platform.materialization_of("Account")["fields_hidden"] == [FIELD]
    check = readable_check(platform)
    assert not check.passed and FIELD in (check.description or "") and "PermissionsRead" in (check.description or "")

    admin = admin_of(org)
    permission_set = admin.query("SELECT Id FROM PermissionSet")["records"][0]["Id"]
    admin.FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}", "PermissionsRead": True}
    )
    result = catch_up(platform, org)  # the next run sees the field again and backfills the column alone
    meta = platform.materialization(result, "Account")
    assert meta["fields_backfilled"] == [FIELD] and meta["fields_hidden"] == []
    assert platform.rows("Account")[ids[0]][FIELD] == "Changed while hidden"
    assert marked_fields(platform.delta_table("Account")) == {}
    assert readable_check(platform).passed


def test_a_field_deleted_in_the_org_fails_no_run_keeps_its_last_values_and_new_rows_get_null(tmp_path, org):
    field_id, _ = add_readable_field(org)
    platform, ids = loaded(tmp_path, org)

    admin_of(org).restful(f"tooling/sobjects/CustomField/{field_id}", method="DELETE")
    dirty_by_a_gap(org, ids[1])
    with org.store.transaction() as txn:
        created = txn.create("Account", {"Name": "Created after the deletion"})
    result = catch_up(platform, org)
    assert result.success
    assert [r.tags["cdc/mode"] for r in run_sensor_requests(platform)] == ["reconcile"]  # the org refuses the field
    rows = platform.rows("Account")
    assert rows[ids[1]]["_sf_dirty_since"] is None and rows[ids[1]]["Phone"] == "555 0100"
    assert [rows[i][FIELD] for i in ids] == ["Tier 0", "Tier 1", "Tier 2", "Tier 3"] and rows[created][FIELD] is None
    assert marked_fields(platform.delta_table("Account"))[FIELD]["status"] == "removed"
    meta = platform.materialization_of("Account")
    assert meta["fields_removed"] == [FIELD] and meta["fields_hidden"] == []
    assert readable_check(platform).passed  # deleted is no error: reported, kept

    request = dg.RunRequest(asset_selection=[replica_key("Account")], run_config=mode_run_config({"Account": "resync"}))
    assert platform.execute(request).success  # a resync neither asks for the field nor loses its values
    rows = platform.rows("Account")
    assert [rows[i][FIELD] for i in ids] == ["Tier 0", "Tier 1", "Tier 2", "Tier 3"] and rows[created][FIELD] is None


def add_hidden_field_with_values(emu: Emulator, ids: list[str]) -> str:
    """The admin adds Account.Loyalty_Tier__c without granting the integration user read access, and loads values
    into `ids` (their events leave the field out); returns the PermissionSet to grant it through."""
    admin = admin_of(emu)
    admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={"FullName": f"Account.{FIELD}", "Metadata": {"type": "Text", "label": "Loyalty Tier", "length": 40}},
    )
    set_tiers(emu, {record_id: f"Loaded {n}" for n, record_id in enumerate(ids)})
    permission_set = admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set})
    return permission_set


def grant_read(emu: Emulator, permission_set: str) -> None:
    admin_of(emu).FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}", "PermissionsRead": True}
    )


def test_a_field_added_and_made_readable_is_a_column_backfilled_for_that_column_alone_by_the_describe_sensor(
    tmp_path, org
):
    Workload(org, seed=5).build_org(accounts=6)
    platform = make_platform(tmp_path, org, objects=["Account"])
    assert platform.run().success  # the initial load, without the field
    ids = org.store.ids("Account")
    permission_set = add_hidden_field_with_values(org, ids[:2])
    assert catch_up(platform, org).success  # the loads' events carry no value of a field the platform cannot read
    before = platform.rows("Account")
    assert FIELD not in before[ids[0]]

    grant_read(org, permission_set)
    assert platform.sensor_requests(DESCRIBE_SENSOR) == []  # a sensor just started: its first window is ahead
    # A window after the one it last asked Account in.
    requests = platform.run_sensor(DESCRIBE_SENSOR, cursor=json.dumps({"Account": 0}))
    assert [(r.tags["cdc/mode"], r.asset_selection) for r in requests] == [("describe", [replica_key("Account")])]
    meta = platform.materialization_of("Account")
    assert meta["fields_added"] == [FIELD] and meta["fields_backfilled"] == [FIELD] and meta["mode"] == "describe"
    rows = platform.rows("Account")
    assert [rows[i][FIELD] for i in ids[:3]] == ["Loaded 0", "Loaded 1", None]
    # That column alone: every other value, and each row's commit time, as the replica had them (no resync).
    assert all({k: v for k, v in rows[i].items() if k != FIELD} == before[i] for i in ids)

    set_tiers(org, {ids[2]: "After"})  # written once readable: its event carries it
    assert catch_up(platform, org).success
    assert platform.rows("Account")[ids[2]][FIELD] == "After"
    assert readable_check(platform).passed


def test_events_naming_a_field_made_readable_add_its_column_and_backfill_the_values_no_event_carried(tmp_path, org):
    Workload(org, seed=5).build_org(accounts=6)
    platform = make_platform(tmp_path, org, objects=["Account"])
    assert platform.run().success
    ids = org.store.ids("Account")
    permission_set = add_hidden_field_with_values(org, ids[:2])
    grant_read(org, permission_set)
    set_tiers(org, {ids[2]: "After"})  # the first event naming the field: the run asks describe() again

    result = catch_up(platform, org)
    assert result.success
    meta = platform.materialization(result, "Account")
    assert meta["columns_added"] == 1 and meta["fields_added"] == [FIELD]
    rows = platform.rows("Account")
    assert [rows[i][FIELD] for i in ids[:4]] == ["Loaded 0", "Loaded 1", "After", None]


SCORE = "Score__c"


def set_scores(emu: Emulator, values: dict[str, Any]) -> None:
    with emu.store.transaction(user_id=emu.store.admin_user_id) as txn:
        for record_id, value in values.items():
            txn.update("Account", record_id, {SCORE: value})


def describe_run(platform: Platform) -> dg.ExecuteInProcessResult:
    request = dg.RunRequest(
        asset_selection=[replica_key("Account")], run_config=mode_run_config({"Account": "describe"})
    )
    result = platform.execute(request, checks=True)
    assert result.success
    return result


def add_score(emu: Emulator, metadata: dict | None = None) -> str:
    """The admin adds Account.Score__c (Number(8,2) unless `metadata` says otherwise), readable by the integration
    user; returns its CustomField id."""
    admin = admin_of(emu)
    field_id = admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={
            "FullName": f"Account.{SCORE}",
            "Metadata": metadata or {"type": "Number", "label": "Score", "precision": 8, "scale": 2},
        },
    )["id"]
    sets = admin.query("SELECT Id FROM PermissionSet WHERE Name = 'Replication'")["records"]
    permission_set = (
        sets[0]["Id"] if sets else admin.PermissionSet.create({"Name": "Replication", "Label": "Replication"})["id"]
    )
    if not sets:
        admin.PermissionSetAssignment.create(
            {"AssigneeId": emu.store.default_user_id, "PermissionSetId": permission_set}
        )
    grant = {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{SCORE}", "PermissionsRead": True}
    admin.FieldPermissions.create(grant)
    return field_id


def to_text(emu: Emulator, field_id: str) -> None:
    admin_of(emu).restful(
        f"tooling/sobjects/CustomField/{field_id}",
        method="PATCH",
        json={"Metadata": {"type": "Text", "length": 255, "precision": None, "scale": None}},
    )


def scored(tmp_path, org: Emulator, **platform_options) -> tuple[Platform, list[str], str]:
    field_id = add_score(org)
    Workload(org, seed=5).build_org(accounts=4)
    ids = org.store.ids("Account")
    set_scores(org, {ids[0]: 12.5, ids[1]: 7.0})
    platform = Platform(
        tmp_path / "p",
        None,
        ["Account"],
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        **platform_options,
    )
    assert platform.run().success
    assert platform.rows("Account")[ids[0]][SCORE] == 12.5
    return platform, ids, field_id


def column_type(platform: Platform, name: str, table: str = "Account") -> str:
    return str(pa.schema(platform.delta_table(table).schema().to_arrow()).field(name).type)


def test_a_type_change_the_column_holds_changes_nothing_and_one_it_cannot_hold_rewrites_that_column_alone(
    tmp_path, org
):
    platform, ids, field_id = scored(tmp_path, org)

    # Number(8,2) -> Number(16,4): the double column holds it; nothing is rewritten, new values follow.
    admin_of(org).restful(
        f"tooling/sobjects/CustomField/{field_id}", method="PATCH", json={"Metadata": {"precision": 16, "scale": 4}}
    )
    version = platform.delta_table("Account").version()
    result = describe_run(platform)
    assert platform.materialization(result, "Account")["fields_retyped"] == []
    assert platform.delta_table("Account").version() == version  # no rewrite, no commit
    set_scores(org, {ids[1]: 123456789.1234})
    assert catch_up(platform, org).success
    assert platform.rows("Account")[ids[1]][SCORE] == 123456789.1234

    # Number -> Text: the org keeps the values as text; the column takes the new type and the org's values.
    before = platform.rows("Account")
    to_text(org, field_id)
    result = describe_run(platform)
    meta = platform.materialization(result, "Account")
    assert meta["fields_retyped"] == [SCORE] and meta["fields_backfilled"] == []
    assert column_type(platform, SCORE) == "string"
    rows = platform.rows("Account")
    assert [rows[i][SCORE] for i in ids] == ["12.5", "123456789.1234", None, None]
    # That column alone: every other value, and each row's position, as the replica had them.
    changed = {k for i in ids for k, v in rows[i].items() if k != SCORE and v != before[i][k]}
    assert changed == set()
    mark = field_marks(platform.delta_table("Account"))[SCORE]
    assert mark["status"] == "retyped" and mark["type"] == "string" and mark["column"] == "double"
    assert marked_fields(platform.delta_table("Account")) == {}  # followed: nothing kept unfollowed
    check = readable_check(platform)
    assert check.passed and "retyped" in (check.description or "")
    catalog = {r["name"]: r for r in platform.table("Account__fields")}
    assert catalog[SCORE]["status"] == "retyped" and catalog[SCORE]["type"] == "string"

    set_scores(org, {ids[0]: "gold"})  # a value only the new type holds, carried by its event
    assert catch_up(platform, org).success
    assert platform.rows("Account")[ids[0]][SCORE] == "gold"
    assert differences(org, "Account", platform.rows("Account")) == []


def test_a_reconcile_that_reads_a_value_its_column_cannot_hold_rewrites_the_column_and_fails_no_run(tmp_path, org):
    platform, ids, field_id = scored(tmp_path, org)
    to_text(org, field_id)  # no describe run: the platform learns it from the value it reads
    org.set_faults(gap_fraction=1.0)
    set_scores(org, {ids[0]: "O'Brien"})
    org.set_faults(gap_fraction=0.0)
    assert catch_up(platform, org).success
    assert platform.rows("Account")[ids[0]]["_sf_dirty_since"] is not None
    assert [r.tags["cdc/mode"] for r in run_sensor_requests(platform)] == ["reconcile"]  # succeeded (else it raises)
    meta = platform.materialization_of("Account")
    assert meta["fields_retyped"] == [SCORE]
    rows = platform.rows("Account")
    assert rows[ids[0]][SCORE] == "O'Brien" and rows[ids[0]]["_sf_dirty_since"] is None and rows[ids[1]][SCORE] == "7"
    assert differences(org, "Account", platform.rows("Account")) == []


def test_a_value_that_does_not_fit_is_a_typed_error_naming_the_column_not_the_value():
    from object_schema.describe import ObjectSchema
    from replication.records import ValueDoesNotFit, replica_rows

    describe = {
        "name": "Account",
        "fields": [
            {"name": "Id", "type": "id"},
            {"name": SCORE, "type": "double"},
            {"name": "SystemModstamp", "type": "datetime"},
        ],
    }
    text = pa.table({"Id": ["001000000000001AAA"], SCORE: ["O'Brien"], "SystemModstamp": ["2026-12-07T00:00:00Z"]})
    with pytest.raises(ValueDoesNotFit) as raised:
        replica_rows(text, ObjectSchema.from_describe(describe), source="reconcile", synced_at=datetime.now(UTC))
    assert raised.value.column == SCORE and "O'Brien" not in str(raised.value)


def test_a_field_deleted_and_created_again_with_another_type_is_a_new_column_with_the_new_fields_values_only(
    tmp_path, org
):
    field_id, _ = add_readable_field(org)  # Text(40)
    platform, ids = loaded(tmp_path, org)
    admin = admin_of(org)
    admin.restful(f"tooling/sobjects/CustomField/{field_id}", method="DELETE")
    assert describe_run(platform)  # seen deleted: marked removed, kept with its values
    assert marked_fields(platform.delta_table("Account"))[FIELD]["status"] == "removed"

    # The name is free again ("_del" appended to the deleted one's): a Number(6,1) takes it, with new values.
    admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={
            "FullName": f"Account.{FIELD}",
            "Metadata": {"type": "Number", "label": "Tier", "precision": 6, "scale": 1},
        },
    )
    permission_set = admin.query("SELECT Id FROM PermissionSet")["records"][0]["Id"]
    admin.FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}", "PermissionsRead": True}
    )
    set_tiers(org, {ids[1]: 12.5})
    result = describe_run(platform)
    assert platform.materialization(result, "Account")["fields_recreated"] == [FIELD]
    assert column_type(platform, FIELD) == "double"
    rows = platform.rows("Account")
    assert [rows[i][FIELD] for i in ids] == [None, 12.5, None, None]  # never an old "Tier n"
    mark = field_marks(platform.delta_table("Account"))[FIELD]
    assert mark["status"] == "recreated" and mark["type"] == "double" and mark["column"] == "string"
    # The old values stay in the versions before the rewrite (Delta time travel), which the mark names.
    old = DeltaTable(str(platform.delta_table("Account").table_uri), version=mark["version"] - 1)
    assert "Tier 0" in read_table(old, columns=[FIELD])[FIELD].to_pylist()
    assert catch_up(platform, org).success  # the update's event (its other fields) applies over the rewrite
    assert differences(org, "Account", platform.rows("Account")) == []


def test_a_retyped_column_reaches_the_history_which_retypes_its_own_and_keeps_earlier_versions(tmp_path, org):
    platform, ids, field_id = scored(tmp_path, org, history=True)
    to_text(org, field_id)
    set_scores(org, {ids[1]: "seven"})
    result = describe_run(platform)
    assert platform.check_results(result, "Account")[HISTORY_MATCHES_REPLICA].passed
    assert column_type(platform, SCORE, history_name("Account")) == "string"
    versions = sorted(
        (v for v in platform.table(history_name("Account")) if v["Id"] == ids[1]), key=lambda v: v["_version"]
    )
    # The earlier version keeps its value as the new type holds it; the rewrite made one version with the org's.
    assert [v[SCORE] for v in versions] == ["7", "seven"] and versions[-1]["_is_current"]


def test_the_field_catalog_holds_labels_types_picklist_values_record_types_and_follows_describe(tmp_path, org):
    admin = admin_of(org)
    regions = {"valueSetDefinition": {"value": [{"fullName": "EMEA"}, {"fullName": "APAC"}]}}
    admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={
            "FullName": "Account.Region__c",
            "Metadata": {"type": "Picklist", "label": "Region", "valueSet": regions},
        },
    )
    permission_set = admin.PermissionSet.create({"Name": "Regions", "Label": "Regions"})["id"]
    admin.PermissionSetAssignment.create({"AssigneeId": org.store.default_user_id, "PermissionSetId": permission_set})
    grant = {"SobjectType": "Account", "Field": "Account.Region__c", "PermissionsRead": True}
    admin.FieldPermissions.create({"ParentId": permission_set, **grant})
    Workload(org, seed=5).build_org(accounts=3)
    platform = make_platform(tmp_path, org, objects=["Account"])
    result = platform.run()
    assert result.success
    catalog_uri = platform.materialization(result, "Account")["field_catalog_uri"]
    described = {f["name"]: f for f in simple_salesforce_client(org).Account.describe()["fields"]}
    picklist = "Region__c"

    def catalog() -> dict[tuple[str, str], dict]:
        rows = read_table(DeltaTable(str(catalog_uri))).to_pylist()
        return {(r["kind"], r["name"]): r for r in rows}

    rows = catalog()
    assert rows[("field", picklist)]["label"] == described[picklist]["label"]
    assert [(p["value"], p["label"]) for p in rows[("field", picklist)]["picklist_values"]] == [
        (p["value"], p["label"]) for p in described[picklist]["picklistValues"]
    ]
    assert rows[("field", "Name")]["replicated"] and rows[("field", "Name")]["type"] == "string"
    assert rows[("record_type", "Master")]["record_type_id"] == "012000000000000AAA"
    version = DeltaTable(str(catalog_uri)).version()
    assert catch_up(platform, org).success
    assert DeltaTable(str(catalog_uri)).version() == version  # describe() unchanged: not rewritten

    grant_read(org, add_hidden_field_with_values(org, []))
    describe_run(platform)
    row = catalog()[("field", FIELD)]
    assert row["label"] == "Loyalty Tier" and row["replicated"] and row["status"] is None


def test_a_backfilled_column_reaches_the_history_as_one_version_of_each_record_whose_value_it_changed(tmp_path, org):
    Workload(org, seed=5).build_org(accounts=4)
    platform = Platform(
        tmp_path / "p", None, ["Account"], TEST_SPARK_CONF, salesforce=resource(org), initial_load=True, history=True
    )
    assert platform.run().success
    ids = org.store.ids("Account")
    grant_read(org, add_hidden_field_with_values(org, ids[:2]))
    assert catch_up(platform, org).success  # the loads' events leave the field out: no version yet

    result = describe_run(platform)
    assert platform.check_results(result, "Account")[HISTORY_MATCHES_REPLICA].passed
    versions = platform.table(history_name("Account"))
    current = {v["Id"]: v for v in versions if v["_is_current"]}
    assert [current[i][FIELD] for i in ids[:3]] == ["Loaded 0", "Loaded 1", None]
    made = sorted(v["Id"] for v in versions if v[FIELD] is not None)
    assert made == sorted(ids[:2])  # one version each for the records the backfill changed, none for the others
    assert all(sum(v["Id"] == i for v in versions) == 1 for i in ids[2:])
    *_, before, backfilled = sorted((v for v in versions if v["Id"] == ids[0]), key=lambda v: v["_version"])
    # An update, closing the version before it where it opens: no hole, no overlap in the record's validity.
    assert backfilled["_change_type"] == "UPDATE" and before["_valid_to"] == backfilled["_valid_from"]


def test_a_record_whose_create_event_the_backfill_ran_ahead_of_is_read_whole_and_keeps_the_backfilled_value(
    tmp_path, org
):
    Workload(org, seed=5).build_org(accounts=3)
    platform = make_platform(tmp_path, org, objects=["Account"])
    assert platform.run().success
    with org.store.transaction() as txn:
        created = txn.create("Account", {"Name": "Created while the field was hidden"})
    permission_set = add_hidden_field_with_values(org, [created])  # its events: no value of the field
    grant_read(org, permission_set)
    describe_run(platform)  # the backfill runs before the record's create event is applied
    row = platform.rows("Account")[created]
    assert row[FIELD] == "Loaded 0" and row["_sf_dirty_since"] is not None

    assert catch_up(platform, org).success  # its events are skipped while it is dirty
    assert [r.tags["cdc/mode"] for r in run_sensor_requests(platform)] == ["reconcile"]  # read whole, by id
    row = platform.rows("Account")[created]
    assert row[FIELD] == "Loaded 0" and row["Name"] == "Created while the field was hidden"
    assert row["_sf_dirty_since"] is None
    assert differences(org, "Account", platform.rows("Account")) == []


def test_a_poll_that_reads_a_value_its_column_cannot_hold_rewrites_the_column_and_fails_no_run(tmp_path, org):
    field_id = add_score(org)
    Workload(org, seed=5).build_org(accounts=4)
    ids = org.store.ids("Account")
    set_scores(org, {ids[0]: 12.5})
    platform = poll_platform(tmp_path, org, objects=["Account"])
    assert run_replicas(platform, ["Account"]).success  # the initial load
    to_text(org, field_id)
    set_scores(org, {ids[0]: "platinum"})  # the next poll reads it by SystemModstamp

    result = run_replicas(platform, ["Account"])
    assert result.success
    meta = platform.materialization(result, "Account")
    assert meta["mode"] == "poll" and meta["fields_retyped"] == [SCORE]
    assert platform.rows("Account")[ids[0]][SCORE] == "platinum" and column_type(platform, SCORE) == "string"
    assert differences(org, "Account", platform.rows("Account")) == []


def test_an_event_whose_value_only_the_new_type_holds_is_not_quarantined_and_its_record_reconciled_in_it(tmp_path, org):
    platform, ids, field_id = scored(tmp_path, org)
    to_text(org, field_id)  # no describe run: the event's value is the first sign
    set_scores(org, {ids[0]: "gold"})
    result = catch_up(platform, org)
    assert result.success  # its record dirty: nothing applied half
    assert platform.rows("Account")[ids[0]]["_sf_dirty_since"] is not None
    # No bad input: the value fits the type describe() gives the field now, so the line is not quarantined.
    assert platform.quarantine() == []
    assert [r.tags["cdc/mode"] for r in run_sensor_requests(platform)] == ["reconcile"]
    assert platform.materialization_of("Account")["fields_retyped"] == [SCORE]
    assert platform.rows("Account")[ids[0]][SCORE] == "gold" and column_type(platform, SCORE) == "string"
    assert differences(org, "Account", platform.rows("Account")) == []


def test_an_event_whose_value_fits_neither_the_old_nor_the_new_type_is_still_quarantined(tmp_path, org):
    platform, ids, field_id = scored(tmp_path, org)
    admin_of(org).restful(
        f"tooling/sobjects/CustomField/{field_id}",
        method="PATCH",
        json={"Metadata": {"type": "Checkbox", "defaultValue": False}},
    )
    # A landing writer's line: a text where the org now has a checkbox and had a number.
    platform.land([event("Account", "UPDATE", [ids[0]], int(time.time() * 1000), **{SCORE: "gold"})])
    assert catch_up(platform, org).success
    assert [SCORE in r["reason"] for r in platform.quarantine()] == [True]


def test_a_rewrite_recorded_by_a_run_that_ended_before_doing_it_is_done_by_the_next_run(tmp_path, org):
    field_id, _ = add_readable_field(org)  # Text(40)
    platform, ids = loaded(tmp_path, org)
    admin = admin_of(org)
    admin.restful(f"tooling/sobjects/CustomField/{field_id}", method="DELETE")
    assert describe_run(platform)
    # Created again with the same type: only the mark tells the column apart from the old field's.
    admin.restful(
        "tooling/sobjects/CustomField",
        method="POST",
        json={"FullName": f"Account.{FIELD}", "Metadata": {"type": "Text", "label": "Tier", "length": 40}},
    )
    permission_set = admin.query("SELECT Id FROM PermissionSet")["records"][0]["Id"]
    admin.FieldPermissions.create(
        {"ParentId": permission_set, "SobjectType": "Account", "Field": f"Account.{FIELD}", "PermissionsRead": True}
    )
    set_tiers(org, {ids[1]: "New"})
    # What the run's first commit records before its rewrite, and the run ends there (a crash).
    table = platform.delta_table("Account")
    entries = {
        FIELD: {"status": "recreated", "since": "2026-12-07T00:00:00+00:00", "type": "string", "column": "string"}
        | {"version": table.version() + 2, "pending": True}
    }
    keep_describe(table, simple_salesforce_client(org).Account.describe(), {FIELD_ACCESS_PROPERTY: json.dumps(entries)})
    assert [platform.rows("Account")[i][FIELD] for i in ids] == ["Tier 0", "Tier 1", "Tier 2", "Tier 3"]

    assert catch_up(platform, org).success  # a plain run: it finds the rewrite pending and does it
    assert [platform.rows("Account")[i][FIELD] for i in ids] == [None, "New", None, None]
    mark = field_marks(platform.delta_table("Account"))[FIELD]
    assert mark["status"] == "recreated" and "pending" not in mark
    assert differences(org, "Account", platform.rows("Account")) == []
