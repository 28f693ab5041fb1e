"""spark_ops.history: ordered changes + current rows -> one version per record per transaction."""

from __future__ import annotations

import json
from datetime import UTC

import pytest

from object_schema.describe import ObjectSchema
from salesforce_emulator.landing_lines import event
from spark_ops.fold import fold_changes
from spark_ops.history import CHANGE_TYPE, TRANSACTION_KEY, transaction_versions
from spark_ops.parse import parse_lines, to_change_rows

A1, A2 = "001000000000001AAA", "001000000000002AAA"
T0 = 1_763_800_000_000


@pytest.fixture(scope="module")
def account(sample_dir) -> ObjectSchema:
    return ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))


def frames(spark, schema, lines, current=()):
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    return to_change_rows(parse_lines(df, {schema.name: schema})), spark.createDataFrame(
        list(current), schema.spark_schema()
    )


def versions(spark, schema, lines, current=()) -> list[dict]:
    changes, cur = frames(spark, schema, lines, current)
    rows = [r.asDict() for r in transaction_versions(changes, cur, schema).collect()]
    return sorted(rows, key=lambda r: (r["Id"], r["_sf_commit_ts"], r["_sf_sequence_number"] or 0))


def row(schema, **values):
    base = {f.name: None for f in schema.spark_schema().fields}
    return {**base, "_sf_deleted": False, "_sf_source": "cdc", **values}


def test_one_version_per_transaction_in_commit_order_and_twice_in_one_transaction_is_one(spark, account):
    out = versions(
        spark,
        account,
        [
            event("Account", "CREATE", [A1], T0, tx="t1", Name="Acme", Industry="Retail"),
            event("Account", "UPDATE", [A1], T0 + 1000, tx="t2", seq=1, Rating="Hot"),
            event("Account", "UPDATE", [A1], T0 + 1000, tx="t2", seq=2, Rating="Warm", Industry="Energy"),
            event("Account", "UPDATE", [A1], T0 + 2000, tx="t3", nulled=["Industry"], Industry=None),
        ],
    )
    assert [(v[TRANSACTION_KEY], v[CHANGE_TYPE], v["Name"], v["Industry"], v["Rating"]) for v in out] == [
        ("t1", "CREATE", "Acme", "Retail", None),
        ("t2", "UPDATE", "Acme", "Energy", "Warm"),  # the state after the whole transaction, not after seq 1
        ("t3", "UPDATE", "Acme", None, "Warm"),
    ]
    assert {v["_sf_source"] for v in out} == {"cdc"} and all(v["_sf_dirty_since"] is None for v in out)


def test_the_last_version_equals_the_folded_row(spark, account):
    lines = [
        event("Account", "CREATE", [A1], T0, tx="t1", Name="Acme", Industry="Retail"),
        event("Account", "DELETE", [A1], T0 + 1000, tx="t2"),
        event("Account", "UNDELETE", [A1], T0 + 2000, tx="t3", Name="Acme 2"),
        event("Account", "UPDATE", [A1, A2], T0 + 3000, tx="t4", Rating="Cold"),
    ]
    current = [row(account, Id=A2, Name="Beta", Industry="Tech", _sf_bucket=A2[:13])]
    out = versions(spark, account, lines, current)
    changes, cur = frames(spark, account, lines, current)
    folded = {r["Id"]: r.asDict() for r in fold_changes(changes, cur, account).collect()}
    last = {v["Id"]: v for v in out}
    for rid in (A1, A2):
        for column in [c for c, _ in account.columns] + ["_sf_deleted", "_sf_deleted_at", "_sf_commit_ts"]:
            assert last[rid][column] == folded[rid][column], (rid, column)
    a1 = [v for v in out if v["Id"] == A1]
    assert [(v[CHANGE_TYPE], v["_sf_deleted"], v["Name"], v["Industry"]) for v in a1] == [
        ("CREATE", False, "Acme", "Retail"),
        ("DELETE", True, "Acme", "Retail"),
        ("UNDELETE", False, "Acme 2", None),
        ("UPDATE", False, "Acme 2", None),
    ]
    assert a1[1]["_sf_deleted_at"] is not None and a1[2]["_sf_deleted_at"] is None
    assert [v["Industry"] for v in out if v["Id"] == A2] == ["Tech"]  # untouched fields keep the stored value


def test_gap_late_and_unknown_records_never_invent_a_version(spark, account):
    current = [row(account, Id=A2, Name="Beta", _sf_commit_ts=None, _sf_bucket=A2[:13])]
    out = versions(
        spark,
        account,
        [
            event("Account", "UPDATE", [A1], T0, tx="t1", Rating="Hot"),  # never seen: only its given fields known
            event("Account", "UPDATE", [A1], T0 + 1000, tx="t2", Rating="Cold"),
            event("Account", "UPDATE", [A2], T0, tx="t3", Rating="Warm"),
            event("Account", "GAP_UPDATE", [A2], T0 + 1000, tx="t4"),
            event("Account", "UPDATE", [A2], T0 + 2000, tx="t5", Rating="Cold"),
        ],
        current,
    )
    assert [(v["Id"], v[TRANSACTION_KEY]) for v in out] == [(A2, "t3")]


def test_a_gap_inside_a_transaction_makes_no_version_of_that_transaction(spark, account):
    current = [row(account, Id=A1, Name="Acme", _sf_bucket=A1[:13])]
    out = versions(
        spark,
        account,
        [
            event("Account", "UPDATE", [A1], T0, tx="t1", seq=1, Rating="Hot"),
            event("Account", "GAP_UPDATE", [A1], T0, tx="t1", seq=2),
        ],
        current,
    )
    assert out == []


def test_superseded_changes_make_no_version(spark, account):
    from datetime import datetime

    stamp = datetime.fromtimestamp((T0 + 1000) / 1000, UTC).replace(tzinfo=None)
    current = [row(account, Id=A1, Name="Acme", _sf_commit_ts=stamp, _sf_source="snapshot", _sf_bucket=A1[:13])]
    out = versions(
        spark,
        account,
        [
            event("Account", "UPDATE", [A1], T0, tx="t1", Rating="Hot"),
            event("Account", "UPDATE", [A1], T0 + 2000, tx="t2", Rating="Cold"),
        ],
        current,
    )
    assert [(v[TRANSACTION_KEY], v["Rating"], v["Name"]) for v in out] == [("t2", "Cold", "Acme")]
