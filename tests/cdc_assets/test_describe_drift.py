"""Change rows against describe() (docs/design/contract.md §3, §8, §9): strict values, objects replicated late, fields
added later.

Each test goes through Dagster's real materialize() over real Delta tables.
"""

from __future__ import annotations

import json
import shutil

import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.names import META_FIELDS_EXCLUDED
from object_schema.describe import NAME_REASON, ObjectSchema
from replication.describe_drift import normalized
from replication.field_catalog import UNNAMED, catalog_name
from resources.delta import read_table
from salesforce_emulator.landing_lines import event
from spark_ops.parse import parse_lines, to_change_rows

A1, A2, A3 = "001000000000001AAA", "001000000000002AAA", "001000000000003AAA"
C1, C2 = "003000000000001AAA", "003000000000002AAA"
T0 = 1_763_800_000_000
REPLICA_IDENTITY = ("applied", "gaps", "late", "superseded", "dirty_skipped", "held", "overflow")


def add_up(meta: dict) -> bool:
    return meta["events_read"] == sum(meta[k] for k in REPLICA_IDENTITY)


@pytest.fixture
def describe_dir(tmp_path, sample_dir):
    target = tmp_path / "describe"
    shutil.copytree(sample_dir / "describe", target)
    return target


def platform(tmp_path, describe_dir, objects, name="p") -> Platform:
    return Platform(tmp_path / name, describe_dir, objects, TEST_SPARK_CONF)


def test_a_value_that_does_not_fit_quarantines_its_line_and_dirties_the_record(tmp_path, describe_dir):
    p = platform(tmp_path, describe_dir, ["Account"])
    p.land(
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", NumberOfEmployees=10),
            event("Account", "UPDATE", [A1], T0 + 1000, NumberOfEmployees="many", Name="Renamed"),
            event("Account", "UPDATE", [A1], T0 + 2000, Rating="Hot"),
        ]
    )
    result = p.run(close_after=0)
    row = p.rows("Account")[A1]
    assert row["Name"] == "Acme" and row["NumberOfEmployees"] == 10 and row["Rating"] is None  # nothing partial
    assert row["_sf_dirty_since"] is not None  # the reconcile will fetch it
    [q] = p.quarantine()
    assert q["source_line"] == 2 and q["reason"] == "field NumberOfEmployees value 'many' is not a valid int"
    ce = p.materialization(result, "change_events")
    assert ce["lines_quarantined"] == 1 and ce["lines_gapped"] == 1 and ce["ingested"] == 3
    meta = p.materialization(result, "Account")
    assert meta["gaps"] == 1 and meta["dirty_skipped"] == 1 and meta["dirty_records"] == 1 and add_up(meta)


def test_an_empty_string_is_null_as_on_the_snapshot_path(tmp_path, describe_dir):
    p = platform(tmp_path, describe_dir, ["Account"])
    p.land(
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Description="long text"),
            event("Account", "UPDATE", [A1], T0 + 1000, Description="", Industry=""),
        ]
    )
    p.run(close_after=0)
    row = p.rows("Account")[A1]
    assert row["Description"] is None and row["Industry"] is None and row["Name"] == "Acme"


def test_an_object_replicated_later_gets_rows_derived_with_its_describe(tmp_path, describe_dir):
    lines = [
        event(
            "Contact",
            "CREATE",
            [C1],
            T0,
            Name={"FirstName": "Ada", "LastName": "Lovelace"},
            MailingAddress={"City": "London", "Country": "UK"},
            Birthdate="1815-12-10",
            LastModifiedDate="2025-11-22T03:26:40-05:00",
        ),
        event("Contact", "CREATE", [C2], T0 + 1000, Name={"LastName": "Babbage"}, Birthdate="1791-12-26"),
        event("Contact", "UPDATE", [C2], T0 + 2000, Birthdate="1791-1-2"),  # not a date: quarantined, C2 dirty
        event("Contact", "UPDATE", [C1], T0 + 3000, nulled=["MailingAddress.City"], MailingAddress={"City": None}),
        event("Account", "CREATE", [A1], T0 + 4000, Name="Acme"),
    ]
    early = platform(tmp_path, describe_dir, ["Account"])
    early.land(lines)
    first = early.run(close_after=0)
    assert early.materialization(first, "change_events")["ignored"] == 4 and early.quarantine() == []

    later = platform(tmp_path, describe_dir, ["Account", "Contact"])  # same landing zone and warehouse
    result = later.run(close_after=0)
    rows = later.rows("Contact")
    assert (rows[C1]["FirstName"], rows[C1]["LastName"], rows[C1]["MailingCity"], rows[C1]["MailingCountry"]) == (
        "Ada",
        "Lovelace",
        None,
        "UK",
    )
    assert (
        str(rows[C1]["Birthdate"]) == "1815-12-10" and str(rows[C1]["LastModifiedDate"]) == "2025-11-22 08:26:40+00:00"
    )
    assert str(rows[C2]["Birthdate"]) == "1791-12-26" and rows[C2]["_sf_dirty_since"] is not None
    [q] = later.quarantine()
    assert q["source_line"] == 3 and "field Birthdate value '1791-1-2' is not a valid date" in q["reason"]
    meta = later.materialization(result, "Contact")
    assert meta["values_invalid"] == 1 and meta["applied"] == 3 and meta["gaps"] == 1 and add_up(meta)
    later.run(close_after=0)  # a re-run quarantines nothing twice and changes nothing
    assert len(later.quarantine()) == 1 and later.rows("Contact") == rows


def test_a_field_unknown_to_describe_is_counted_then_added_and_backfilled(tmp_path, describe_dir):
    account = describe_dir / "Account.json"
    full = json.loads(account.read_text())
    account.write_text(json.dumps(full | {"fields": [f for f in full["fields"] if f["name"] != "Rating"]}))
    p = platform(tmp_path, describe_dir, ["Account"])
    p.land(
        [
            event("Account", "CREATE", [A1], T0, Name="Acme", Rating="Hot"),
            event("Account", "CREATE", [A2], T0 + 1000, Name="Globex"),
        ]
    )
    first = p.run(close_after=0)
    meta = p.materialization(first, "Account")
    assert meta["unknown_fields"] == 1 and meta["unknown_field_names"] == ["Rating"]
    assert "Rating" not in p.rows("Account")[A1]

    account.write_text(json.dumps(full))  # the field reaches describe()
    p.land(
        [
            event("Account", "UPDATE", [A2], T0 + 2000, Rating="Warm"),
            event("Account", "CREATE", [A3], T0 + 3000, Name="Initech", Rating="Cold"),
        ]
    )
    second = p.run(close_after=0)
    rows = p.rows("Account")
    assert rows[A2]["Rating"] == "Warm" and rows[A3]["Rating"] == "Cold"
    assert rows[A1]["Rating"] is None and rows[A1]["_sf_dirty_since"] is not None  # carried it before: reconcile
    assert rows[A2]["_sf_dirty_since"] is None and rows[A3]["_sf_dirty_since"] is None
    meta = p.materialization(second, "Account")
    assert meta["columns_added"] == 1 and meta["schema_backfill"] == 1 and meta["unknown_fields"] == 0
    assert meta["events_read"] == 2 and meta["applied"] == 2 and add_up(meta)
    p.run(close_after=0)
    assert p.rows("Account")[A1]["_sf_dirty_since"] == rows[A1]["_sf_dirty_since"]


# Field names no org gives but a describe file or an impostor org may: a comma splits Delta's statistics-columns
# property, a quote and a space change an expression, a line feed forges a log line.
UNNAMED_FIELDS = ["Evil,Name", "Name = 'x' OR true", "Notes\n2026-01-01 INFO forged"]


def test_a_field_whose_name_is_no_api_name_is_reported_and_never_a_column(tmp_path, describe_dir):
    account = describe_dir / "Account.json"
    full = json.loads(account.read_text())
    odd = [{"name": n, "type": "string", "nillable": True, "calculated": False} for n in UNNAMED_FIELDS]
    account.write_text(json.dumps(full | {"fields": full["fields"] + odd}))
    p = platform(tmp_path, describe_dir, ["Account"])
    p.land([event("Account", "CREATE", [A1], T0, Name="Acme", **dict.fromkeys(UNNAMED_FIELDS, "forged"))])
    result = p.run(close_after=0)  # raises if any step fails

    table = p.delta_table("Account")
    columns = {f.name for f in table.schema().fields}
    assert columns.isdisjoint(UNNAMED_FIELDS) and p.rows("Account")[A1]["Name"] == "Acme"
    assert set(table.metadata().configuration["delta.dataSkippingStatsColumns"].split(",")) <= columns
    meta = p.materialization(result, "Account")
    # Named escaped (the line feed as \n), and no event value for them counts as a field describe() lacks.
    assert meta[META_FIELDS_EXCLUDED] == {
        "Evil,Name": NAME_REASON,
        "Name = 'x' OR true": NAME_REASON,
        "Notes\\n2026-01-01 INFO forged": NAME_REASON,
    }
    assert meta["unknown_fields"] == 0 and meta["applied"] == 1 and not p.quarantine()
    catalog = {r["name"]: r for r in read_table(p.delta_table(catalog_name("Account"))).to_pylist()}
    assert [(catalog[n]["replicated"], catalog[n]["status"]) for n in UNNAMED_FIELDS] == [(False, UNNAMED)] * 3
    assert (catalog["Name"]["replicated"], catalog["Name"]["status"]) == (True, None)


def test_rows_stored_untyped_are_derived_with_the_describe(spark, sample_dir):
    """Rows stored while their object was not replicated (`typed` false) are derived with its describe(); a value
    that does not fit makes a gap row and a quarantine entry."""
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Contact.json").read_text()))
    lines = spark.createDataFrame(
        [
            ("old.jsonl", 1, event("Contact", "UPDATE", [C1], T0, Name={"FirstName": "Ada"}, Birthdate="1815-12-10")),
            ("old.jsonl", 2, event("Contact", "UPDATE", [C2], T0, HasOptedOutOfEmail="yes")),
        ],
        "source_file string, source_line long, raw string",
    )
    stored = to_change_rows(parse_lines(lines, {})).toArrow()
    assert not any(stored["typed"].to_pylist())
    rows, bad, gapped = normalized(spark, stored, schema)
    by_id = {r["record_id"]: r for r in rows.to_pylist()}
    assert dict(by_id[C1]["fields"]) == {"FirstName": "Ada", "Birthdate": "1815-12-10"}
    assert by_id[C2]["change_type"] == "GAP_UPDATE" and gapped == 1
    assert bad.to_pylist()[0]["source_line"] == 2 and "HasOptedOutOfEmail" in bad.to_pylist()[0]["reason"]
