"""spark_ops.parse: landed lines -> canonical change rows, or a quarantine reason (docs/design/contract.md §4, §9)."""

from __future__ import annotations

import json

import pytest

from object_schema.describe import ObjectSchema
from salesforce_emulator.landing_lines import event
from spark_ops.parse import (
    MAX_BATCH_CHANGE_BYTES,
    ROW_OVERHEAD_BYTES,
    bound_batch,
    may_pass_batch_bound,
    parse_lines,
    quarantined,
    to_change_rows,
)

A1, A2 = "001000000000001AAA", "001000000000002AAA"
C1 = "003000000000001AAA"


@pytest.fixture(scope="module")
def schemas(sample_dir) -> dict[str, ObjectSchema]:
    return {
        n: ObjectSchema.from_describe(json.loads((sample_dir / "describe" / f"{n}.json").read_text()))
        for n in ("Account", "Contact")
    }


def parse(spark, schemas, lines):
    df = spark.createDataFrame(
        [("f.jsonl", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    parsed = parse_lines(df, schemas).cache()
    return (
        [r.asDict() for r in to_change_rows(parsed).orderBy("source_line", "record_id").collect()],
        {r.source_line: r.reason for r in quarantined(parsed).collect()},
    )


def test_compound_fields_are_flattened_to_component_columns(spark, schemas):
    rows, bad = parse(
        spark,
        schemas,
        [
            event("Account", "UPDATE", [A1], 1, BillingAddress={"City": "Chicago"}),
            event(
                "Contact",
                "UPDATE",
                [C1],
                2,
                Name={"FirstName": "Ada"},
                nulled=["MailingAddress.City"],
                MailingAddress={"City": None},
            ),
        ],
    )
    assert bad == {}
    assert rows[0]["fields"] == {"BillingCity": "Chicago"} and rows[0]["set_fields"] == ["BillingCity"]
    assert rows[1]["fields"] == {"FirstName": "Ada", "MailingCity": None}
    assert rows[1]["set_fields"] == ["FirstName", "MailingCity"]


def test_explicit_null_is_a_set_field_with_null_value(spark, schemas):
    rows, _ = parse(spark, schemas, [event("Contact", "UPDATE", [C1], 1, nulled=["Phone"], Phone=None)])
    assert rows[0]["fields"] == {"Phone": None} and rows[0]["set_fields"] == ["Phone"]


def test_diff_fields_are_kept_with_the_diff_as_json_text(spark, schemas):
    diff = "--- \n+++ " + "0" * 64 + "\n@@ -1,1 +1,1 @@\n-a\n+b"
    rows, bad = parse(
        spark,
        schemas,
        [
            event(
                "Account", "UPDATE", [A1], 1, diffs=["Description", "BillingAddress.Street"], Description={"diff": diff}
            ),
            event("Account", "UPDATE", [A2], 2, Rating="Hot"),
        ],
    )
    assert bad == {}
    assert rows[0]["diff_fields"] == ["Description", "BillingStreet"]  # compound names mapped like nulledFields
    assert json.loads(rows[0]["fields"]["Description"]) == {"diff": diff}
    assert rows[1]["diff_fields"] == []


def test_a_cometd_diff_is_known_by_its_shape_and_a_text_that_looks_like_one_is_text(spark, schemas):
    """Over CometD no header names a diff (no diffFields) nor a nulled field (no nulledFields): the value's shape
    does, `{"diff": ...}` an object in the line; a text value spelling the same characters stays text."""
    diff = "--- \n+++ " + "0" * 64 + "\n@@ -1,1 +1,1 @@\n-a\n+b"
    looks_like_one = json.dumps({"diff": diff}, separators=(",", ":"))
    envelope = json.loads(event("Account", "UPDATE", [A2], 2, cometd=True, Description={"diff": diff}))
    rows, bad = parse(
        spark,
        schemas,
        [
            event("Account", "UPDATE", [A1], 1, cometd=True, Description={"diff": diff}, Rating=None),
            json.dumps(envelope["data"]),  # the `data` object alone
            event("Account", "UPDATE", ["001000000000003AAA"], 3, cometd=True, Description=looks_like_one),
        ],
    )
    assert bad == {}
    assert "diffFields" not in json.loads(event("Account", "UPDATE", [A1], 1, cometd=True))["data"]["payload"]
    assert [r["diff_fields"] for r in rows] == [["Description"], ["Description"], []]
    assert json.loads(rows[0]["fields"]["Description"]) == {"diff": diff}
    assert rows[0]["fields"]["Rating"] is None and "Rating" in rows[0]["set_fields"]  # a null is a set field
    assert rows[2]["fields"]["Description"] == looks_like_one


def test_one_event_naming_two_records_becomes_two_rows(spark, schemas):
    rows, _ = parse(spark, schemas, [event("Account", "UPDATE", [A1, A2], 1, Rating="Hot")])
    assert [r["record_id"] for r in rows] == [A1, A2]
    assert rows[0]["event_key"] == rows[1]["event_key"]


@pytest.mark.parametrize(
    "line, reason",
    [
        ("{not json", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        ('{"data": {"event": {"replayId": 1}}}', "no data.payload object"),
        ('{"data": {"payload": {"Name": "x"}}}', "payload has no ChangeEventHeader"),
        (event("Account", "MERGE", [A1], 1), "unknown changeType 'MERGE'"),
        (
            event("Account", "UPDATE", ["001' OR Id != '"], 1),
            "header recordIds holds a value that is not a Salesforce id",
        ),
        (event("Account", "UPDATE", [A1, None], 1), "header recordIds holds a value that is not a Salesforce id"),
        (event("Account", "UPDATE", [], 1), "header has no recordIds"),
    ],
)
def test_bad_lines_are_quarantined_with_a_reason(spark, schemas, line, reason):
    rows, bad = parse(spark, schemas, [line])
    assert rows == [] and bad == {1: reason}


@pytest.mark.parametrize(
    "field, value, sf_type",
    [
        ("NumberOfEmployees", "many", "int"),
        ("NumberOfEmployees", 2.5, "int"),
        ("CreatedDate", "yesterday", "datetime"),
        ("CreatedDate", "2025-11-22T08:26:40", "datetime"),  # no zone: which instant?
        ("AnnualRevenue", "NaN", "currency"),
        ("AnnualRevenue", " 5", "currency"),
    ],
)
def test_value_that_does_not_fit_quarantines_the_line_and_makes_its_records_dirty(
    spark, schemas, field, value, sf_type
):
    rows, bad = parse(spark, schemas, [event("Account", "UPDATE", [A1, A2], 1, Name="Kept?", **{field: value})])
    assert bad == {1: f"field {field} value '{value}' is not a valid {sf_type}"}
    assert [(r["record_id"], r["change_type"], r["fields"], r["set_fields"]) for r in rows] == [
        (A1, "GAP_UPDATE", {}, []),
        (A2, "GAP_UPDATE", {}, []),
    ]


def test_a_create_with_a_bad_value_becomes_a_gap_create_with_the_events_identity(spark, schemas):
    rows, bad = parse(spark, schemas, [event("Account", "CREATE", [A1], 1, tx="t1", Name="A", AnnualRevenue="lots")])
    assert list(bad) == [1]
    assert rows[0]["change_type"] == "GAP_CREATE" and rows[0]["event_key"] == "Account|t1|1|CREATE"


@pytest.mark.parametrize(
    "field, value, sf_type",
    [
        ("Birthdate", "2025-1-2", "date"),
        ("Birthdate", "2025-11-22T23:26:40-05:00", "date"),  # a datetime is not a date (a cast would cut it)
        ("Birthdate", "2025-02-30", "date"),
        ("HasOptedOutOfEmail", "yes", "boolean"),
        ("HasOptedOutOfEmail", "1", "boolean"),
        ("HasOptedOutOfEmail", "TRUE", "boolean"),
    ],
)
def test_lenient_spark_casts_are_not_accepted(spark, schemas, field, value, sf_type):
    rows, bad = parse(spark, schemas, [event("Contact", "UPDATE", [C1], 1, **{field: value})])
    assert bad == {1: f"field {field} value '{value}' is not a valid {sf_type}"}
    assert rows[0]["change_type"] == "GAP_UPDATE"


def test_strict_forms_accept_what_salesforce_sends(spark, schemas):
    rows, bad = parse(
        spark,
        schemas,
        [
            event(
                "Contact",
                "UPDATE",
                [C1],
                1,
                Birthdate="1815-12-10",
                HasOptedOutOfEmail=False,
                Email="",
                LastModifiedDate="2025-11-22T23:26:40-05:00",
                MailingAddress={"Latitude": 51.5, "Longitude": -1e-3},
            ),
        ],
    )
    assert bad == {} and rows[0]["change_type"] == "UPDATE"
    assert rows[0]["fields"]["HasOptedOutOfEmail"] == "false" and rows[0]["fields"]["Email"] == ""


def test_header_with_wrong_type_is_quarantined_not_guessed(spark, schemas):
    line = json.loads(event("Account", "UPDATE", [A1], 1))
    line["data"]["payload"]["ChangeEventHeader"]["commitTimestamp"] = "soon"
    _rows, bad = parse(spark, schemas, [json.dumps(line)])
    assert bad == {1: "header commitTimestamp missing or not an integer"}


def test_unreplicated_entities_parse_without_typing(spark, schemas):
    rows, bad = parse(spark, schemas, [event("Widget__c", "UPDATE", ["a01000000000001AAA"], 1, Size__c="big")])
    assert bad == {} and rows[0]["entity"] == "Widget__c" and rows[0]["fields"] == {"Size__c": "big"}


@pytest.fixture(scope="module")
def person_org_schemas() -> dict[str, ObjectSchema]:
    """The emulator's describe(): a person-account org (Account.Name a union) with a Contact time field."""
    from salesforce_emulator.schema import OBJECTS

    return {n: ObjectSchema.from_describe(OBJECTS[n].describe()) for n in ("Account", "Contact")}


def test_account_name_is_text_for_a_business_account_and_components_for_a_person_account(spark, person_org_schemas):
    assert {"Name", "FirstName", "LastName", "MiddleName", "Suffix"} <= set(person_org_schemas["Account"].column_names)
    rows, bad = parse(
        spark,
        person_org_schemas,
        [
            event("Account", "UPDATE", [A1], 1, Name="Acme Corp"),
            event(
                "Account",
                "CREATE",
                [A2],
                2,
                IsPersonAccount=True,
                Name={"Salutation": "Dr.", "FirstName": "Ada", "MiddleName": "J.", "LastName": "Lovelace"},
            ),
            event(
                "Account", "UPDATE", [A2], 3, nulled=["Name.MiddleName"], Name={"LastName": "King", "MiddleName": None}
            ),
        ],
    )
    assert bad == {}
    assert rows[0]["fields"] == {"Name": "Acme Corp"} and rows[0]["set_fields"] == ["Name"]
    # The parts only: the org formats a person's Name by its locale, and the fold has it fetched (test_fold.py)
    assert rows[1]["fields"] == {
        "IsPersonAccount": "true",
        "Salutation": "Dr.",
        "FirstName": "Ada",
        "MiddleName": "J.",
        "LastName": "Lovelace",
    }
    assert "Name" not in rows[1]["set_fields"]
    assert rows[2]["fields"] == {"LastName": "King", "MiddleName": None}  # an update names only what it changed
    assert rows[2]["set_fields"] == ["LastName", "MiddleName"]


@pytest.mark.parametrize(
    "value, fits",
    [
        ("08:30:00.000Z", True),
        ("23:59:59.999Z", True),
        ("08:30", False),
        ("8:30:00.000Z", False),
        ("24:00:00.000Z", False),
        ("08:30:00Z", False),
        ("08:30:00.000Z\n", False),
    ],
)
def test_a_time_value_must_be_hh_mm_ss_sss_z(spark, person_org_schemas, value, fits):
    rows, bad = parse(spark, person_org_schemas, [event("Contact", "UPDATE", [C1], 1, Best_Time_To_Call__c=value)])
    assert (bad == {}) is fits
    assert rows[0]["change_type"] == ("UPDATE" if fits else "GAP_UPDATE")


@pytest.mark.parametrize(
    "millis", [1_700_000_000_000_000, 9_300_000_000_000_000, 1_700_000_000_000_000_000, -9_000_000_000_000]
)
def test_a_commit_timestamp_outside_salesforces_date_range_is_quarantined_before_converting(spark, schemas, millis):
    """Microseconds or nanoseconds written as milliseconds: Spark's conversion overflowed (9.3e15 ms and up) or made
    an instant no Python datetime holds (1.7e15 ms, year 55,000), failing the whole batch."""
    rows, bad = parse(
        spark,
        schemas,
        [
            event("Account", "UPDATE", [A1], 1_763_800_000_000, Rating="Hot"),
            event("Account", "UPDATE", [A2], millis, Rating="Hot"),
        ],
    )
    assert [r["record_id"] for r in rows] == [A1]
    assert bad == {
        2: f"header commitTimestamp {millis} is not epoch milliseconds in Salesforce's dateTime range "
        "1700-01-01T00:00:00Z..4000-12-31T00:00:00Z (microseconds or nanoseconds written as milliseconds?)"
    }


@pytest.mark.parametrize(
    "name, shown",
    [
        ("X" * 300, "X" * 40 + "' (300 characters)"),
        ("Account\n", "Account?' (8 characters)"),
        ("../../etc", "??????etc' (9 characters)"),
        ("Obj__", "Obj__' (5 characters)"),
        ("a__b__c__d", "a__b__c__d' (10 characters)"),
    ],
)
def test_an_entity_name_that_is_not_a_salesforce_api_name_is_quarantined(spark, schemas, name, shown):
    """A 300-character entityName made a change_events partition folder too long to create: the commit failed."""
    rows, bad = parse(spark, schemas, [event(name, "UPDATE", [A1], 1, Rating="Hot")])
    assert rows == [] and bad[1].startswith(f"header entityName '{shown} is not a Salesforce object name: ")


def test_api_names_with_namespaces_and_suffixes_are_accepted(spark, schemas):
    names = ["ns__Invoice__c", "Alert__e", "My_Object_2__c", "X" * 80]
    rows, bad = parse(spark, schemas, [event(n, "UPDATE", ["a01000000000001AAA"], 1) for n in names])
    assert bad == {} and [r["entity"] for r in rows] == names


@pytest.mark.parametrize("record_id", ["001000000000001\n", "001000000000001AAA\n", "001000000000001\r\n", "001*\n"])
def test_a_record_id_with_a_trailing_line_break_is_not_an_id(spark, schemas, record_id):
    """Java's `$` matches before a final line terminator: such an id would become a phantom row that no reconcile of
    its object could fetch (the org answers MALFORMED_ID for the whole batch)."""
    rows, bad = parse(spark, schemas, [event("Account", "GAP_UPDATE", [record_id], 1)])
    assert rows == [] and bad == {1: "header recordIds holds a value that is not a Salesforce id"}


def test_a_value_with_a_trailing_line_break_does_not_fit_its_type(spark, schemas):
    rows, bad = parse(spark, schemas, [event("Account", "UPDATE", [A1], 1, NumberOfEmployees="12\n")])
    assert bad == {1: "field NumberOfEmployees value '12\n' is not a valid int"}
    assert rows[0]["change_type"] == "GAP_UPDATE"


def test_an_event_naming_more_records_than_one_transaction_can_change_is_an_overflow(spark, schemas):
    """One change row per record id, each with the whole field map: 200,000 ids would make 200,000 rows of one line.
    Past Salesforce's 10,000 records a transaction, the event is taken as an overflow: one row, a full resync."""
    many = [f"001{i:012d}AAA" for i in range(1, 10_002)]
    rows, bad = parse(
        spark,
        schemas,
        [
            event("Account", "UPDATE", many, 1, tx="t1", Rating="Hot"),
            event("Account", "UPDATE", many[:10_000], 2, Rating="Warm"),
        ],
    )
    overflow = [r for r in rows if r["source_line"] == 1]
    assert [(r["record_id"], r["change_type"], r["fields"], r["event_key"]) for r in overflow] == [
        ("000000000000000AAA", "GAP_OVERFLOW", {}, "Account|t1|1|GAP_OVERFLOW")
    ]
    assert bad[1].startswith(
        "header recordIds names 10001 records with 9 bytes of fields each (at most 10000 records"
    ) and bad[1].endswith("taken as an overflow, Account is resynced in full")
    assert len(rows) - 1 == 10_000 and set(bad) == {1}  # at the limit: one row per id


def test_an_event_whose_change_rows_would_be_too_large_is_an_overflow(spark, schemas, monkeypatch):
    """Fewer ids, but each row carries a large field map: bounded by the bytes the rows would take."""
    import spark_ops.parse as parse_module

    monkeypatch.setattr(parse_module, "MAX_EVENT_BYTES", 50_000)
    ids = [f"001{i:012d}AAA" for i in range(1, 101)]
    rows, bad = parse(
        spark,
        schemas,
        [
            event("Account", "UPDATE", ids, 1, Description="d" * 1_000),
            event("Account", "UPDATE", ids[:10], 2, Description="d" * 1_000),
        ],
    )
    assert [(r["source_line"], r["change_type"]) for r in rows if r["source_line"] == 1] == [(1, "GAP_OVERFLOW")]
    assert set(bad) == {1} and "100 records with 1011 bytes of fields each" in bad[1]
    assert len(rows) == 11


def test_a_batch_whose_lines_would_explode_past_its_bound_takes_the_lines_past_it_as_overflows(spark, schemas):
    """Lines each within their own bound (100 ids, 1 KB of fields: ~150 KB of change rows) but many of them: the
    batch's change rows, which the driver collects, are bounded too, in the batch's order; what is past the bound
    becomes an overflow of its object (a resync), and a line quarantined anyway counts for nothing."""
    ids = [f"001{i:012d}AAA" for i in range(1, 101)]
    lines = [
        event("Account", "UPDATE", ids, 1, Description="d" * 1_000),
        "not an event",
        event("Account", "UPDATE", ids, 2, Description="d" * 1_000),
        event("Account", "UPDATE", ids[:1], 3, Description="d" * 1_000),  # small, but past the bound too
    ]
    each = 100 * (1_011 + ROW_OVERHEAD_BYTES)
    bound = 2 * each - 1  # the second event passes it
    assert may_pass_batch_bound(sum(len(line) for line in lines), len(lines), bound)
    df = spark.createDataFrame(
        [("f.jsonl", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    parsed = bound_batch(parse_lines(df, schemas), bound).cache()
    rows = to_change_rows(parsed).collect()
    bad = {r.source_line: r.reason for r in quarantined(parsed).collect()}
    assert sorted({(r.source_line, r.change_type) for r in rows}) == [
        (1, "UPDATE"),
        (3, "GAP_OVERFLOW"),
        (4, "GAP_OVERFLOW"),
    ]
    assert sum(r.source_line == 1 for r in rows) == 100
    assert set(bad) == {2, 3, 4}
    assert (
        bad[3] == f"the batch's change rows pass {bound} bytes at this line (100 records): taken as an overflow, "
        "Account is resynced in full"
    )
    assert not may_pass_batch_bound(20_000, 20, MAX_BATCH_CHANGE_BYTES)  # a landing run of a few events: no sort
