"""The hash's three forms agree value for value, and field selection refuses what it cannot do.

`hash_text` (hashlib) is the definition; `hashed_sql` (Spark's sha2) writes the CDC and Datastream paths and
`hash_arrow` the resync, reconcile and poll paths: a digest of one value must be the same whichever path wrote
it, or joins across paths and the per-record guard would see two values.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pytest
from settings import SAMPLE

from object_schema.describe import ObjectSchema
from object_schema.hashing import SALT_ENV, hash_arrow, hash_text
from salesforce_emulator.landing_lines import event
from spark_ops.datastream import parse_datastream
from spark_ops.parse import parse_lines
from spark_ops.protect import hashed_sql, salt_frame
from spark_ops.sql import run_sql

SALT = "s3cr3t-salt"
VALUES = ["ada@example.com", "+1 (555) 010-0199", "Ünïcødé ✓ 𝄞", "x", "", None]
# sha256("s3cr3t-salt" + "Secret Corp"), computed once outside the platform: digests stored before must not change.
SECRET_CORP = "719e36b927406abc822cfa405129fa6ceceb71765cdaea0c6e602ce862c1308f"
ID = "001000000000001AAA"


def test_hash_text_is_salted_sha256_and_keeps_null_and_empty_null():
    assert hash_text("ada@example.com", SALT) == hashlib.sha256(b"s3cr3t-saltada@example.com").hexdigest()
    assert hash_text("Secret Corp", SALT) == SECRET_CORP
    assert hash_text("ada@example.com", "other") != hash_text("ada@example.com", SALT)
    assert hash_text("", SALT) is None and hash_text(None, SALT) is None


def test_the_spark_and_arrow_forms_agree_with_the_definition(spark):
    frame = spark.createDataFrame([(v,) for v in VALUES], "v string")
    hashed = run_sql(spark, f"SELECT {hashed_sql('v')} FROM {{frame}}", frame=frame, hash_salt=salt_frame(spark, SALT))
    spark_digests = [r[0] for r in hashed.collect()]
    arrow_digests = hash_arrow(pa.array(VALUES, pa.string()), SALT).to_pylist()
    expected = [hash_text(v, SALT) for v in VALUES]
    assert spark_digests == expected and arrow_digests == expected


def _plans(df) -> str:
    """Everything Spark prints of a query once run: its logical plans and the physical plan it executed."""
    execution = df._jdf.queryExecution()
    return execution.toString() + execution.executedPlan().toString()


@pytest.mark.parametrize("kind", ["cometd", "datastream"])
def test_the_salt_is_in_no_query_text_or_plan_and_digests_are_unchanged(spark, monkeypatch, capsys, kind):
    monkeypatch.setenv(SALT_ENV, SALT)
    schemas = {"Account": ObjectSchema.from_describe(_account(), hashed=["Name"])}
    if kind == "cometd":
        line, parse = (
            event("Account", "UPDATE", [ID], 1_700_000_000_000, Name="Secret Corp", Industry="Energy"),
            parse_lines,
        )
    else:
        line, parse = (
            json.dumps(
                {
                    "uuid": "u1",
                    "read_method": "salesforce-cdc",
                    "object": "Account",
                    "source_timestamp": 1_700_000_000_000,
                    "source_metadata": {"object_name": "Account"},
                    "payload": {"Id": ID, "Name": "Secret Corp", "Industry": "Energy"},
                }
            ),
            parse_datastream,
        )
    lines = spark.createDataFrame([("f.jsonl", 1, line)], "source_file string, source_line long, raw string")
    parsed = parse(lines, schemas)
    [row] = parsed.select("quarantine_reason", "fields").collect()
    assert row.quarantine_reason is None
    assert row.fields["Name"] == SECRET_CORP and row.fields["Industry"] == "Energy"
    parsed.explain("extended")
    printed = _plans(parsed) + capsys.readouterr().out
    assert "sha2" in printed and SALT not in printed


def _account() -> dict:
    return json.loads((SAMPLE / "describe" / "Account.json").read_text())


def test_include_keeps_id_and_expands_compound_names():
    schema = ObjectSchema.from_describe(_account(), include=["Name", "BillingAddress"])
    assert schema.column_names[:2] == ["Id", "Name"] and "BillingCity" in schema.column_names
    assert "Industry" not in schema.column_names and "Industry" not in schema.org_fields
    assert schema.knows("Industry")  # left out, not unknown: no describe refresh for it


def test_exclude_drops_columns_and_org_fields():
    schema = ObjectSchema.from_describe(_account(), exclude=["Industry"], hashed=["Name"])
    assert "Industry" not in schema.org_fields and schema.hashed == frozenset({"Name"})
    assert schema.with_columns({"Industry": "picklist"}).column_names == schema.column_names


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hashed": ["AnnualRevenue"]}, "only text fields other than Id can be hashed"),
        ({"hashed": ["Id"]}, "only text fields other than Id can be hashed"),
        ({"exclude": ["Nmae"]}, "describe\\(\\) does not have"),
        ({"include": ["Name"], "hashed": ["Industry"]}, "which `fields` leaves out"),
    ],
)
def test_selection_refuses_what_it_cannot_do(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ObjectSchema.from_describe(_account(), **kwargs)
