"""spark_ops.datastream: Datastream's Salesforce events -> canonical SNAPSHOT change rows, and how they fold."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from object_schema.describe import ObjectSchema
from salesforce_emulator.landing_lines import event
from shared.names import API_NAME_RULE
from spark_ops.datastream import LAST_IN_INSTANT, parse_landed
from spark_ops.events import mark_duplicates
from spark_ops.fold import fold_changes
from spark_ops.parse import quarantined, to_change_rows

A1, A2 = "001000000000001AAA", "001000000000002AAA"
T0 = 1_763_800_000_000
NO_TIME = (
    "Datastream event has no source_timestamp (or first sort key, or payload SystemModstamp) that is a time in "
    "Salesforce's dateTime range 1700-01-01T00:00:00Z..4000-12-31T00:00:00Z (epoch milliseconds or ISO-8601)"
)


@pytest.fixture(scope="module")
def account(sample_dir) -> ObjectSchema:
    return ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def ds(
    record_id: str = A1,
    ms: int = T0,
    *,
    uuid: str | None = None,
    method: str = "salesforce-cdc",
    change: str | None = "UPDATE",
    deleted: bool = False,
    obj: str = "Account",
    read_ms: int | None = None,
    **fields,
) -> str:
    """A Datastream Salesforce event line (the whole row in `payload`)."""
    return json.dumps(
        {
            "stream_name": "projects/p/locations/l/streams/s",
            "read_method": method,
            "object": obj,
            "schema_key": "k",
            "uuid": uuid or f"u-{record_id}-{ms}-{change}",
            "read_timestamp": iso(read_ms or ms + 5),
            "source_timestamp": iso(ms),
            "sort_keys": [ms, record_id],
            "source_metadata": {"object_name": obj, "change_type": change, "is_deleted": deleted},
            "payload": {"Id": record_id, "IsDeleted": deleted, "SystemModstamp": iso(ms), **fields},
        }
    )


def frame(spark, files: dict[str, list[str]]):
    return spark.createDataFrame(
        [(name, i + 1, line) for name, lines in files.items() for i, line in enumerate(lines)],
        "source_file string, source_line long, raw string",
    )


def parse(spark, schema, files):
    parsed = parse_landed(frame(spark, files), {schema.name: schema}).cache()
    return (
        [r.asDict() for r in to_change_rows(parsed).orderBy("source_file", "source_line").collect()],
        {(r.source_file, r.source_line): r.reason for r in quarantined(parsed).collect()},
    )


def fold(spark, schema, files, current=()):
    parsed = parse_landed(frame(spark, files), {schema.name: schema})
    cur = spark.createDataFrame(list(current), schema.spark_schema())
    return {r["Id"]: r.asDict() for r in fold_changes(to_change_rows(parsed), cur, schema).collect()}


def row(schema, **values):
    base = {f.name: None for f in schema.spark_schema().fields}
    return {**base, "_sf_deleted": False, "_sf_source": "cdc", "_sf_bucket": values["Id"][:13], **values}


def test_format_is_detected_per_file_and_both_give_canonical_rows(spark, account):
    rows, bad = parse(
        spark,
        account,
        {
            "cometd.jsonl": [event("Account", "UPDATE", [A2], T0, Rating="Hot")],
            "ds.jsonl": [
                ds(
                    A1,
                    T0,
                    Name='O\'Brien "Quoted" 日本',
                    Description="line 1\nline 2\u2028still 2",
                    BillingCity="Zürich",
                    AnnualRevenue=12.5,
                    NumberOfEmployees=7,
                )
            ],
        },
    )
    assert bad == {}
    cometd, image = rows
    assert cometd["change_type"] == "UPDATE" and cometd["fields"] == {"Rating": "Hot"}
    assert image["change_type"] == "SNAPSHOT" and image["record_id"] == A1 and image["entity"] == "Account"
    assert image["commit_ts"] == ts(T0) and image["commit_number"] == LAST_IN_INSTANT
    assert image["sequence_number"] == T0 + 5 and image["transaction_key"] == f"datastream:u-{A1}-{T0}-UPDATE"
    assert image["change_origin"] == "salesforce-cdc" and image["replay_id"] is None and image["typed"]
    assert image["fields"] == {
        "Name": 'O\'Brien "Quoted" 日本',
        "Description": "line 1\nline 2\u2028still 2",
        "BillingCity": "Zürich",
        "AnnualRevenue": "12.5",
        "NumberOfEmployees": "7",
        "IsDeleted": "false",
    }
    assert image["set_fields"] == sorted(image["fields"])


def test_delete_flag_comes_from_metadata_change_type_or_payload(spark, account):
    rows, bad = parse(
        spark,
        account,
        {
            "ds.jsonl": [
                ds(A1, T0, change="DELETE", Name="a"),  # change_type only
                json.dumps({**json.loads(ds(A2, T0, change="UPDATE")), "source_metadata": {"is_deleted": True}}),
                ds(A2, T0 + 1, change=None, method="salesforce-backfill", deleted=True),
            ]
        },
    )
    assert bad == {}
    assert [r["fields"]["IsDeleted"] for r in rows] == ["true", "true", "true"]
    assert rows[2]["change_origin"] == "salesforce-backfill"


def test_same_uuid_is_one_event_identity(spark, account):
    files = {
        "a.jsonl": [ds(A1, T0, uuid="same", Name="x")],
        "b.jsonl": [ds(A1, T0, uuid="same", Name="x"), ds(A1, T0, uuid="other")],
    }
    changes = to_change_rows(parse_landed(frame(spark, files), {"Account": account}))
    marked = {(r.source_file, r.transaction_key): r.is_duplicate for r in mark_duplicates(changes).collect()}
    assert marked == {
        ("a.jsonl", "datastream:same"): False,
        ("b.jsonl", "datastream:same"): True,
        ("b.jsonl", "datastream:other"): False,
    }


def test_bad_datastream_lines_are_quarantined_with_a_reason(spark, account):
    good = json.loads(ds(A1, T0))
    lines = [
        "not json",
        json.dumps({k: v for k, v in good.items() if k != "uuid"} | {"read_method": "salesforce-cdc", "x": '"uuid"'}),
        ds(A1, T0, obj="Bad Object!"),
        ds(A1, T0, method="salesforce-telepathy"),
        ds(A1, T0, change="MERGE"),
        json.dumps(good | {"payload": "nope"}),
        json.dumps(good | {"payload": {"Name": "no id"}}),
        json.dumps(good | {"payload": {"Id": "bad-id"}}),
        json.dumps(
            {k: v for k, v in good.items() if k not in ("source_timestamp", "sort_keys")} | {"payload": {"Id": A1}}
        ),
        event("Account", "UPDATE", [A2], T0, Rating="Hot"),  # a CometD line in a Datastream file
        ds(A2, T0, NumberOfEmployees="many"),  # a value that does not fit: quarantined, and a gap row
    ]
    rows, bad = parse(spark, account, {"ds.jsonl": lines})
    reasons = [bad.get(("ds.jsonl", n)) for n in range(1, len(lines) + 1)]
    assert reasons == [
        "not a JSON object",
        "Datastream event has no uuid",
        "Datastream object 'Bad?Object?' (11 characters) is not a Salesforce object name: " + API_NAME_RULE,
        "unknown Datastream read_method 'salesforce-telepathy'",
        "unknown Datastream change_type 'MERGE'",
        "Datastream payload is not an object of fields",
        "Datastream payload has no Id",
        "Datastream payload Id is not a Salesforce id",
        NO_TIME,
        "Datastream event has no uuid",
        "field NumberOfEmployees value 'many' is not a valid int",
    ]
    assert [(r["record_id"], r["change_type"], r["fields"]) for r in rows] == [(A2, "GAP_SNAPSHOT", {})]


@pytest.mark.parametrize(
    "stamp",
    [
        "999999999999999",
        "1700000000000000000",
        "99999-01-01T00:00:00Z",
        "1699-12-31T23:59:59Z",
        "2025-11-22T08:26:40Z\n",
    ],
)
def test_a_source_timestamp_outside_salesforces_date_range_is_quarantined(spark, account, stamp):
    """15 digits of epoch ms is year 33,658: an instant Python's datetime cannot hold, which failed the run that
    read it back. Every time of the event (source_timestamp, sort key, SystemModstamp) is range-checked."""
    good = json.loads(ds(A1, T0))
    bad = good | {"source_timestamp": stamp, "sort_keys": [stamp, A2], "payload": {"Id": A2, "SystemModstamp": stamp}}
    rows, reasons = parse(spark, account, {"ds.jsonl": [json.dumps(good), json.dumps(bad)]})
    assert [r["record_id"] for r in rows] == [A1] and reasons == {("ds.jsonl", 2): NO_TIME}


def test_an_image_resets_the_row_absent_fields_become_null(spark, account):
    current = row(
        account,
        Id=A1,
        Name="Acme",
        Rating="Hot",
        Description="old",
        _sf_commit_ts=ts(T0),
        _sf_commit_number=1,
        _sf_sequence_number=1,
    )
    out = fold(spark, account, {"ds": [ds(A1, T0 + 1000, Name="Acme 2")]}, [current])[A1]
    assert (out["Name"], out["Rating"], out["Description"]) == ("Acme 2", None, None)
    assert out["_sf_source"] == "snapshot" and out["_sf_commit_ts"] == ts(T0 + 1000)
    assert out["_sf_commit_number"] is None and out["_sf_sequence_number"] is None and out["applied"] == 1


def test_deleted_image_deletes_and_a_live_one_undeletes(spark, account):
    current = row(account, Id=A1, Name="Acme", _sf_commit_ts=ts(T0), _sf_commit_number=1, _sf_sequence_number=1)
    deleted = fold(spark, account, {"ds": [ds(A1, T0 + 1000, change="DELETE", deleted=True, Name="Acme")]}, [current])[
        A1
    ]
    assert deleted["_sf_deleted"] and deleted["_sf_deleted_at"] == ts(T0 + 1000) and deleted["Name"] == "Acme"
    back = fold(
        spark,
        account,
        {"ds": [ds(A1, T0 + 1000, change="DELETE", deleted=True, Name="Acme"), ds(A1, T0 + 2000, Name="Back")]},
        [current],
    )[A1]
    assert not back["_sf_deleted"] and back["_sf_deleted_at"] is None and back["Name"] == "Back"


def test_an_image_older_than_a_cdc_row_is_superseded_not_late(spark, account):
    current = row(account, Id=A1, Name="newer", _sf_commit_ts=ts(T0 + 5000), _sf_commit_number=9, _sf_sequence_number=1)
    out = fold(
        spark, account, {"ds": [ds(A1, T0 + 1000, method="salesforce-backfill", change=None, Name="older")]}, [current]
    )[A1]
    assert out["superseded"] == 1 and out["late"] == 0 and out["applied"] == 0
    assert out["_sf_dirty_since"] is None and not out["_changed"]


def test_cdc_changes_at_or_before_an_applied_image_are_superseded(spark, account):
    image = fold(spark, account, {"ds": [ds(A1, T0 + 5000, Name="image")]})[A1]
    assert image["inserted"] and image["_sf_source"] == "snapshot"  # a record never seen: the image is whole
    late = fold(
        spark,
        account,
        {
            "cometd": [
                event("Account", "UPDATE", [A1], T0 + 5000, Name="same instant"),
                event("Account", "UPDATE", [A1], T0 + 1000, Name="older"),
                event("Account", "UPDATE", [A1], T0 + 9000, Rating="Warm"),
            ]
        },
        [{k: v for k, v in image.items() if k in account.spark_schema().names}],
    )[A1]
    assert (late["Name"], late["Rating"]) == ("image", "Warm")
    assert late["superseded"] == 2 and late["applied"] == 1 and late["late"] == 0 and late["_sf_source"] == "cdc"


def test_an_image_sorts_after_the_cometd_changes_of_its_instant(spark, account):
    out = fold(
        spark,
        account,
        {
            "ds": [ds(A1, T0 + 1000, Name="after both")],
            "cometd": [
                event("Account", "CREATE", [A1], T0, Name="a"),
                event("Account", "UPDATE", [A1], T0 + 1000, Name="b", Rating="Hot"),
            ],
        },
    )[A1]
    assert out["Name"] == "after both" and out["Rating"] is None and out["_sf_source"] == "snapshot"


def test_a_datetime_without_a_zone_is_utc_and_a_bad_value_makes_the_record_dirty(spark, account):
    lines = [
        ds(A1, T0, CreatedDate="2025-11-22T08:26:40x"),  # not a datetime at all
        ds(A2, T0, CreatedDate=1_763_800_000_000),  # epoch millis: not Salesforce's datetime form
        ds(A2, T0 + 1, uuid="good", CreatedDate="2025-11-22T08:26:40.000+0000"),
    ]
    _, bad = parse(spark, account, {"ds": lines})
    assert bad == {
        ("ds", 1): "field CreatedDate value '2025-11-22T08:26:40x' is not a valid datetime",
        ("ds", 2): "field CreatedDate value '1763800000000' is not a valid datetime",
    }
    current = row(account, Id=A1, Name="kept", _sf_commit_ts=ts(T0 - 1000), _sf_commit_number=1, _sf_sequence_number=1)
    out = fold(spark, account, {"ds": lines}, [current])
    assert out[A1]["gaps"] == 1 and out[A1]["_sf_dirty_since"] == ts(T0) and out[A1]["Name"] == "kept"
    assert out[A2]["gaps"] == 1 and out[A2]["_sf_dirty_since"] == ts(T0) and out[A2]["dirty_skipped"] == 1


def test_a_datastream_datetime_without_a_zone_is_utc_while_a_cometd_one_is_quarantined(spark, account):
    """Datastream's datetime type carries no zone (seed 003's own examples write them so): UTC. The CometD path,
    whose events always carry the zone, stays strict."""
    local = ds(A1, T0, CreatedDate="2025-11-22T08:26:40", LastModifiedDate="2025-11-22 08:26:41.250")
    cometd = event("Account", "UPDATE", [A2], T0, LastModifiedDate="2025-11-22T08:26:40")
    _rows, bad = parse(spark, account, {"ds": [local], "zz": [cometd]})
    assert bad == {("zz", 1): "field LastModifiedDate value '2025-11-22T08:26:40' is not a valid datetime"}
    out = fold(spark, account, {"ds": [local]})[A1]
    assert out["CreatedDate"] == datetime(2025, 11, 22, 8, 26, 40)  # UTC (the session's zone in tests)
    assert out["LastModifiedDate"] == datetime(2025, 11, 22, 8, 26, 41, 250_000)
