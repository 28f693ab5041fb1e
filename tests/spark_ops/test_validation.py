"""The pandera replica schema on small DataFrames: types, non-null Id and system columns, _sf_source values."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyspark.sql.functions as F
import pytest
from pyspark.sql import types as T

from object_schema.describe import ObjectSchema
from spark_ops.validation import NOT_NULL, SOURCES, replica_schema, schema_errors

SYNCED = datetime(2025, 11, 22, 8, 40, tzinfo=UTC)


@pytest.fixture(scope="module")
def account(sample_dir) -> ObjectSchema:
    return ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))


@pytest.fixture(scope="module")
def loose(account) -> T.StructType:
    """The replica's Spark schema with every column nullable, so bad rows can be built at all."""
    return T.StructType([T.StructField(f.name, f.dataType, True) for f in account.spark_schema().fields])


def _row(account: ObjectSchema, **values) -> dict:
    row = dict.fromkeys(account.spark_schema().names)
    row |= {
        "Id": "001000000000001AAA",
        "Name": "Acme",
        "NumberOfEmployees": 250,
        "AnnualRevenue": 1.5e6,
        "CreatedDate": SYNCED,
        "_sf_deleted": False,
        "_sf_source": "cdc",
        "_sf_synced_at": SYNCED,
        "_sf_bucket": "001000000000001",
    }
    return row | values


def _failures(errors: list[dict]) -> set[tuple[str, str]]:
    return {(e["column"], e["error"]) for e in errors}


def test_schema_covers_every_replica_column_with_its_type(account):
    schema = replica_schema(account)
    expected = {f.name: f.dataType for f in account.spark_schema().fields}
    assert {name: col.dtype.type for name, col in schema.columns.items()} == expected
    assert {name for name, col in schema.columns.items() if not col.nullable} == NOT_NULL
    assert "Name" in schema.columns and schema.columns["Name"].nullable  # describe nillable=false is not enforced


def test_valid_rows_pass_including_partial_rows(spark, account, loose):
    rows = [
        _row(account),
        _row(
            account, Id="001000000000002AAA", Name=None, CreatedDate=None, _sf_source="snapshot", _sf_dirty_since=SYNCED
        ),
    ]
    assert schema_errors(spark.createDataFrame(rows, loose), replica_schema(account)) == []


def test_wrong_column_type_fails(spark, account, loose):
    df = spark.createDataFrame([_row(account)], loose).withColumn("NumberOfEmployees", F.lit("250"))
    assert _failures(schema_errors(df, replica_schema(account))) == {("NumberOfEmployees", "WRONG_DATATYPE")}


def test_null_id_fails(spark, account, loose):
    df = spark.createDataFrame([_row(account), _row(account, Id=None)], loose)
    assert _failures(schema_errors(df, replica_schema(account))) == {("Id", "SERIES_CONTAINS_NULLS")}


def test_unknown_source_and_missing_system_value_fail(spark, account, loose):
    assert "bulk" not in SOURCES
    df = spark.createDataFrame([_row(account, _sf_source="bulk", _sf_deleted=None)], loose)
    assert _failures(schema_errors(df, replica_schema(account))) == {
        ("_sf_source", "DATAFRAME_CHECK"),
        ("_sf_deleted", "SERIES_CONTAINS_NULLS"),
    }


def test_missing_column_fails_and_extra_column_passes(spark, account, loose):
    df = spark.createDataFrame([_row(account)], loose)
    schema = replica_schema(account)
    assert ("Industry", "COLUMN_NOT_IN_DATAFRAME") in _failures(schema_errors(df.drop("Industry"), schema))
    assert schema_errors(df.withColumn("Added__c", F.lit("x")), schema) == []


def test_a_time_column_holds_times_of_day_as_salesforce_returns_them(spark):
    from salesforce_emulator.schema import OBJECTS

    contact = ObjectSchema.from_describe(OBJECTS["Contact"].describe())
    names = contact.spark_schema().names
    loose_schema = T.StructType([T.StructField(f.name, f.dataType, True) for f in contact.spark_schema().fields])
    base = dict.fromkeys(names) | {
        "Id": "003000000000001AAA",
        "_sf_deleted": False,
        "_sf_source": "cdc",
        "_sf_synced_at": SYNCED,
        "_sf_bucket": "003000000000001",
    }
    good = spark.createDataFrame([base | {"Best_Time_To_Call__c": "08:30:00.000Z"}], loose_schema)
    bad = spark.createDataFrame([base | {"Best_Time_To_Call__c": "8:30 AM"}], loose_schema)
    broken = spark.createDataFrame([base | {"Best_Time_To_Call__c": "08:30:00.000Z\n"}], loose_schema)
    assert schema_errors(good, replica_schema(contact)) == []
    assert {e["column"] for e in schema_errors(bad, replica_schema(contact))} == {"Best_Time_To_Call__c"}
    assert {e["column"] for e in schema_errors(broken, replica_schema(contact))} == {"Best_Time_To_Call__c"}
