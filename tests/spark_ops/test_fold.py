"""spark_ops.fold: ordered changes + current rows -> net rows (docs/design/contract.md §3, §5, §6)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from object_schema.describe import ObjectSchema
from salesforce_emulator.landing_lines import event
from spark_ops.fold import CHANGED, fold_changes
from spark_ops.parse import parse_lines, to_change_rows

A1, A2 = "001000000000001AAA", "001000000000002AAA"
T0 = 1_763_800_000_000


@pytest.fixture(scope="module")
def account(sample_dir) -> ObjectSchema:
    return ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))


def fold(spark, schema, lines, current=()):
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    changes = to_change_rows(parse_lines(df, {schema.name: schema}))
    cur = spark.createDataFrame(list(current), schema.spark_schema())
    return {r["Id"]: r.asDict() for r in fold_changes(changes, cur, schema).collect()}


def row(schema, **values):
    base = {f.name: None for f in schema.spark_schema().fields}
    return {**base, "_sf_deleted": False, "_sf_source": "cdc", **values}


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def test_update_only_overwrites_changed_fields(spark, account):
    out = fold(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Industry="Retail", Rating="Cold"),
            event("Account", "UPDATE", [A1], T0 + 1000, Rating="Hot"),
        ],
    )
    assert (out[A1]["Name"], out[A1]["Industry"], out[A1]["Rating"]) == ("Acme", "Retail", "Hot")


def test_explicit_null_nulls_the_field(spark, account):
    out = fold(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Industry="Retail"),
            event("Account", "UPDATE", [A1], T0 + 1000, nulled=["Industry"], Industry=None),
        ],
    )
    assert out[A1]["Industry"] is None and out[A1]["Name"] == "Acme"


@pytest.mark.parametrize("nulled", [["Industry"], []], ids=["in nulledFields", "payload null only"])
def test_explicit_null_nulls_a_stored_value(spark, account, nulled):
    stored = row(
        account,
        Id=A1,
        Name="Acme",
        Industry="Retail",
        _sf_commit_ts=ts(T0),
        _sf_commit_number=1,
        _sf_sequence_number=1,
        _sf_bucket=A1[:13],
    )
    out = fold(spark, account, [event("Account", "UPDATE", [A1], T0 + 1000, nulled=nulled, Industry=None)], [stored])
    assert out[A1]["Industry"] is None and out[A1]["Name"] == "Acme" and out[A1]["applied"] == 1


def test_delete_keeps_values_and_undelete_resets_the_row(spark, account):
    deleted = fold(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Rating="Hot"),
            event("Account", "DELETE", [A1], T0 + 1000),
        ],
    )
    assert deleted[A1]["_sf_deleted"] and deleted[A1]["Name"] == "Acme"
    assert deleted[A1]["_sf_deleted_at"] == ts(T0 + 1000)
    undeleted = fold(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Rating="Hot"),
            event("Account", "DELETE", [A1], T0 + 1000),
            event("Account", "UNDELETE", [A1], T0 + 2000, Name="Acme"),
        ],
    )
    assert not undeleted[A1]["_sf_deleted"] and undeleted[A1]["Rating"] is None


def test_changes_at_or_before_a_snapshot_row_are_superseded(spark, account):
    snapshot = row(account, Id=A1, Name="Org", _sf_commit_ts=ts(T0 + 5000), _sf_source="snapshot", _sf_bucket=A1[:13])
    out = fold(
        spark,
        account,
        [
            event("Account", "UPDATE", [A1], T0 + 1000, Name="old"),
            event("Account", "UPDATE", [A1], T0 + 9000, Rating="Warm"),
        ],
        [snapshot],
    )
    assert out[A1]["Name"] == "Org" and out[A1]["Rating"] == "Warm"
    assert out[A1]["superseded"] == 1 and out[A1]["applied"] == 1 and out[A1]["_sf_dirty_since"] is None


def test_late_change_over_a_cdc_row_makes_it_dirty_without_applying(spark, account):
    cdc_row = row(account, Id=A1, Name="New", _sf_commit_ts=ts(T0 + 5000), _sf_replay_id=10**9, _sf_bucket=A1[:13])
    out = fold(spark, account, [event("Account", "UPDATE", [A1], T0 + 1000, Name="old")], [cdc_row])
    assert out[A1]["Name"] == "New" and out[A1]["late"] == 1
    assert out[A1]["_sf_dirty_since"] == ts(T0 + 1000) and out[A1][CHANGED]


def test_gap_blocks_later_changes_until_reconciled(spark, account):
    out = fold(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, Name="Acme"),
            event("Account", "GAP_UPDATE", [A1], T0 + 1000),
            event("Account", "UPDATE", [A1], T0 + 2000, Name="after gap"),
        ],
    )
    assert out[A1]["Name"] == "Acme" and out[A1]["_sf_dirty_since"] == ts(T0 + 1000)
    assert (out[A1]["applied"], out[A1]["gaps"], out[A1]["dirty_skipped"]) == (1, 1, 1)


def test_update_of_unknown_record_is_stored_but_dirty(spark, account):
    out = fold(
        spark,
        account,
        [
            event("Account", "UPDATE", [A2], T0, Rating="Hot"),
            event("Account", "UPDATE", [A2], T0 + 1000, Name="skipped"),
        ],
    )
    assert out[A2]["Rating"] == "Hot" and out[A2]["Name"] is None
    assert out[A2]["_sf_dirty_since"] == ts(T0) and out[A2]["dirty_skipped"] == 1


@pytest.fixture(scope="module")
def person_account_org() -> ObjectSchema:
    """The emulator's Account: a person-account org, where Account.Name is text or a person's name record."""
    from salesforce_emulator.schema import OBJECTS

    schema = ObjectSchema.from_describe(OBJECTS["Account"].describe())
    assert schema.person_name_parts == ["FirstName", "LastName", "MiddleName", "Salutation", "Suffix"]
    return schema


def test_a_person_accounts_name_parts_are_applied_and_its_name_is_left_to_the_reconcile(spark, person_account_org):
    """The org formats a person's Name from the parts by its locale and never sends it: the parts a CREATE or an
    UPDATE carries are stored, and the record is dirty from that change so the reconcile fetches the Name."""
    created = fold(
        spark,
        person_account_org,
        [
            event(
                "Account",
                "CREATE",
                [A1],
                T0,
                IsPersonAccount=True,
                Phone="555-0100",
                Name={"Salutation": "Dr.", "FirstName": "Ada", "LastName": "Lovelace"},
            ),
        ],
    )[A1]
    assert (created["FirstName"], created["LastName"], created["Salutation"], created["Phone"]) == (
        "Ada",
        "Lovelace",
        "Dr.",
        "555-0100",
    )
    assert created["Name"] is None and created["_sf_dirty_since"] == ts(T0)
    assert (created["applied"], created["names_to_fetch"], created["newly_dirty"]) == (1, 1, True)

    stored = row(
        person_account_org,
        Id=A1,
        IsPersonAccount=True,
        FirstName="Ada",
        LastName="Lovelace",
        Name="Ada Lovelace",
        Phone="555-0100",
        _sf_commit_ts=ts(T0),
        _sf_commit_number=T0,
        _sf_sequence_number=1,
    )
    renamed = fold(
        spark,
        person_account_org,
        [
            event("Account", "UPDATE", [A1], T0 + 1000, Name={"LastName": "King"}),
            event("Account", "UPDATE", [A1], T0 + 2000, Phone="555-0199"),
        ],
        current=[stored],
    )[A1]
    assert (renamed["FirstName"], renamed["LastName"]) == ("Ada", "King")
    assert renamed["_sf_dirty_since"] == ts(T0 + 1000)
    # The stale Name waits for the fetch; the change after the rename waits too, as after any dirtying change.
    assert (renamed["Name"], renamed["Phone"]) == ("Ada Lovelace", "555-0100")
    assert (renamed["applied"], renamed["names_to_fetch"], renamed["dirty_skipped"]) == (1, 1, 1)


def test_a_business_accounts_name_is_applied_directly_and_leaves_it_clean(spark, person_account_org):
    stored = row(
        person_account_org, Id=A2, Name="Acme", _sf_commit_ts=ts(T0), _sf_commit_number=T0, _sf_sequence_number=1
    )
    out = fold(
        spark,
        person_account_org,
        [
            event("Account", "CREATE", [A1], T0, Name="Initech", Industry="Retail"),
            event("Account", "UPDATE", [A2], T0 + 1000, Name="Acme Corp"),
        ],
        current=[stored],
    )
    assert (out[A1]["Name"], out[A2]["Name"]) == ("Initech", "Acme Corp")
    assert [out[i]["_sf_dirty_since"] for i in (A1, A2)] == [None, None]
    assert [out[i]["names_to_fetch"] for i in (A1, A2)] == [0, 0]


def test_a_name_change_already_in_a_reconciled_row_is_superseded_and_fetches_nothing(spark, person_account_org):
    fetched = row(
        person_account_org,
        Id=A1,
        IsPersonAccount=True,
        FirstName="Ada",
        LastName="King",
        Name="King Ada",
        _sf_commit_ts=ts(T0 + 1000),
        _sf_source="reconcile",
    )
    out = fold(
        spark,
        person_account_org,
        [
            event("Account", "UPDATE", [A1], T0 + 1000, Name={"LastName": "King"}),
        ],
        current=[fetched],
    )[A1]
    assert (out["superseded"], out["names_to_fetch"], out["_sf_dirty_since"]) == (1, 0, None)
    assert out["Name"] == "King Ada"  # the org's own formatting (here Eastern order) stays


@pytest.fixture(scope="module")
def business_org() -> ObjectSchema:
    """Account of an org without person accounts, as the emulator describes it after a real org: Name is its own
    compound parent (`"compoundFieldName": "Name"`, `"extraTypeInfo": "switchablepersonname"`), no name parts."""
    from salesforce_emulator.schema import BUSINESS_ACCOUNT

    described = {f["name"]: f for f in BUSINESS_ACCOUNT.describe()["fields"]}
    name = described["Name"]
    assert (name["compoundFieldName"], name["extraTypeInfo"], name["createable"]) == (
        "Name",
        "switchablepersonname",
        True,
    )
    assert not {"FirstName", "LastName", "IsPersonAccount", "PersonEmail"} & set(described)
    return ObjectSchema.from_describe(BUSINESS_ACCOUNT.describe())


def test_an_account_created_and_renamed_without_person_accounts_applies_its_name_and_stays_clean(spark, business_org):
    """Name is text: a create and a rename apply it as they come, nothing is left to fetch, and the change after the
    rename applies too."""
    assert business_org.person_name_parts == []
    created = fold(spark, business_org, [event("Account", "CREATE", [A1], T0, Name="Acme", Industry="Retail")])[A1]
    assert (created["Name"], created["Industry"], created["_sf_dirty_since"]) == ("Acme", "Retail", None)
    assert (created["applied"], created["names_to_fetch"]) == (1, 0)

    stored = row(business_org, Id=A1, Name="Acme", _sf_commit_ts=ts(T0), _sf_commit_number=T0, _sf_sequence_number=1)
    renamed = fold(
        spark,
        business_org,
        [
            event("Account", "UPDATE", [A1], T0 + 1000, Name="Acme Corp"),
            event("Account", "UPDATE", [A1], T0 + 2000, Phone="555-0199"),
        ],
        current=[stored],
    )[A1]
    assert (renamed["Name"], renamed["Phone"], renamed["_sf_dirty_since"]) == ("Acme Corp", "555-0199", None)
    assert (renamed["applied"], renamed["names_to_fetch"], renamed["dirty_skipped"]) == (2, 0, 0)


def test_a_person_account_org_that_describes_name_as_its_own_compound_keeps_the_parts(person_account_org):
    """A person-account org's describe() may name Name as its own compound parent as well (the UI API describes it
    so): the parts stay the person's name parts, and Name itself is not one of them."""
    from salesforce_emulator.schema import OBJECTS

    described = OBJECTS["Account"].describe()
    for f in described["fields"]:
        if f["name"] == "Name":
            f["compoundFieldName"] = "Name"
    schema = ObjectSchema.from_describe(described)
    assert schema.person_name_parts == person_account_org.person_name_parts
    assert "Name" in schema.column_names
