"""replication.diffs: text diffs resolved against the stored value just before the fold (docs/design/contract.md §3)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pyarrow.compute as pc
import pytest

from object_schema.describe import ObjectSchema
from replication import diffs
from replication.diffs import RESOLVE_INPUT, resolve_diffs
from resources.spark import from_arrow
from salesforce_emulator.landing_lines import event
from salesforce_emulator.text_diff import corrupted, unified_diff
from spark_ops.fold import COUNTERS, fold_changes
from spark_ops.parse import parse_lines, to_change_rows

T0 = 1_763_800_000_000
IDS = [f"0010000000000{i:02d}AAA" for i in range(1, 8)]
V0 = "\r\n".join(f"Line {i}: renewal pricing call demo — café" for i in range(30))
V1 = V0.replace("Line 3:", "L3:")
V2 = V1.replace("Line 20:", "L20:")


@pytest.fixture(scope="module")
def account(sample_dir) -> ObjectSchema:
    return ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def row(schema, **values):
    return {**{f.name: None for f in schema.spark_schema().fields}, "_sf_deleted": False, "_sf_source": "cdc", **values}


def diff_update(
    record_id: str, at: int, old: str, new: str, diff: str | None = None, cometd: bool = False, **fields
) -> str:
    """An UPDATE carrying Description as a diff: named in diffFields (Pub/Sub API), or not (`cometd`: the Streaming
    API sends no diffFields, the value's shape says it)."""
    return event(
        "Account",
        "UPDATE",
        [record_id],
        at,
        diffs=None if cometd else ["Description"],
        cometd=cometd,
        Description={"diff": diff or unified_diff(old, new)},
        **fields,
    )


def test_diffs_resolve_against_stored_and_batch_values_or_make_the_record_dirty(spark, account, caplog):
    """Diffs named by diffFields (Pub/Sub API) and diffs known by their shape alone (CometD) alike."""
    a_stored, a_created, a_unknown, a_dirty, a_stale, a_corrupt, a_null = IDS
    lines = [
        diff_update(a_stored, T0 + 1000, V0, V1),
        diff_update(a_stored, T0 + 2000, V1, V2, cometd=True),  # chained on the value just resolved; CometD
        event("Account", "CREATE", [a_created], T0 + 1000, Name="New", Description=V0),
        diff_update(a_created, T0 + 2000, V0, V1, cometd=True),  # base set by a CREATE in the batch
        diff_update(a_unknown, T0 + 1000, V0, V1),  # never seen: no base
        diff_update(a_dirty, T0 + 1000, V0, V1),  # dirty: skipped, left for reconcile
        diff_update(a_stale, T0 - 5000, V0, V1),  # before the snapshot row: superseded
        diff_update(a_corrupt, T0 + 1000, V0, V1, diff=corrupted(V0, V1, "hash"), cometd=True),
        event("Account", "UPDATE", [a_corrupt], T0 + 2000, Name="after the bad diff"),
        diff_update(a_null, T0 + 1000, V0, V1),  # stored value is null
    ]
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    changes = to_change_rows(parse_lines(df, {"Account": account})).toArrow()
    stored = {"Name": "Old", "Description": V0, "_sf_commit_ts": ts(T0)}
    current = spark.createDataFrame(
        [
            row(account, Id=a_stored, **stored),
            row(account, Id=a_dirty, **stored, _sf_dirty_since=ts(T0)),
            row(account, Id=a_stale, **stored | {"_sf_source": "snapshot"}),
            row(account, Id=a_corrupt, **stored),
            row(account, Id=a_null, Name="Old", _sf_commit_ts=ts(T0)),
        ],
        account.spark_schema(),
    )

    with caplog.at_level(logging.WARNING, logger="dagster.builtin.cdc_assets.diffs"):
        resolved, counts = resolve_diffs(changes, current, account)
    assert counts == {"diffs_applied": 3, "diffs_unresolved": 3}
    assert resolved.num_rows == changes.num_rows
    types = dict(zip(resolved["source_line"].to_pylist(), resolved["change_type"].to_pylist()))
    assert [types[i] for i in (5, 8, 9, 10)] == ["GAP_UPDATE", "GAP_UPDATE", "UPDATE", "GAP_UPDATE"]
    warned = [r.getMessage() for r in caplog.records if r.name.endswith("replication.diffs")]
    assert len(warned) == 3 and any(a_corrupt in m and "Description" in m and "SHA-256" in m for m in warned)

    folded = fold_changes(from_arrow(spark, resolved), current, account).toArrow()
    out = {r["Id"]: r for r in folded.to_pylist()}
    assert out[a_stored]["Description"] == V2 and out[a_created]["Description"] == V1
    for rid in (a_unknown, a_corrupt, a_null):  # dirty at the diff's commit
        assert out[rid]["_sf_dirty_since"].timestamp() == (T0 + 1000) / 1000
    assert out[a_corrupt]["Description"] == V0 and out[a_corrupt]["Name"] == "Old"  # later change skipped
    assert out[a_unknown]["Description"] is None  # the diff's JSON text is never stored
    assert out[a_dirty]["Description"] == V0
    totals = {n: int(pc.sum(folded[n]).as_py()) for n in COUNTERS}
    # The counts identity holds: every row is applied, a gap, superseded or skipped.
    assert totals == {"applied": 4, "gaps": 3, "late": 0, "superseded": 1, "dirty_skipped": 2}
    assert sum(totals.values()) == changes.num_rows


def test_rows_without_diffs_of_replicated_fields_pass_through_untouched(spark, account):
    lines = [
        event("Account", "CREATE", [IDS[0]], T0, Name="A", Description=V0),
        event("Account", "UPDATE", [IDS[0]], T0 + 1, diffs=["Notes__c"], Notes__c={"diff": "not replicated"}),
    ]
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    changes = to_change_rows(parse_lines(df, {"Account": account})).toArrow()
    current = spark.createDataFrame([], account.spark_schema())
    resolved, counts = resolve_diffs(changes, current, account)
    assert resolved is changes and counts == {"diffs_applied": 0, "diffs_unresolved": 0}


def test_diffs_of_the_frame_the_apply_hands_to_spark_come_back_once_and_go_back_once(spark, account, monkeypatch):
    """The apply's one Spark input of the changes: only the rows of records with a diff make a round trip (one
    query to the driver, one hand-off back), and the fold over the result sees the resolved text."""
    a_stored, a_corrupt, a_plain = IDS[:3]
    lines = [
        diff_update(a_stored, T0 + 1000, V0, V1),
        diff_update(a_stored, T0 + 2000, V1, V2, cometd=True),
        diff_update(a_corrupt, T0 + 1000, V0, V1, diff=corrupted(V0, V1, "hash")),
        event("Account", "UPDATE", [a_corrupt], T0 + 2000, Name="after the bad diff"),
        event("Account", "UPDATE", [a_plain], T0 + 1000, Name="no diff here"),
    ]
    df = spark.createDataFrame(
        [("f", i + 1, line) for i, line in enumerate(lines)], "source_file string, source_line long, raw string"
    )
    changes = to_change_rows(parse_lines(df, {"Account": account})).toArrow()
    stored = {"Name": "Old", "Description": V0, "_sf_commit_ts": ts(T0)}
    current = spark.createDataFrame(
        [row(account, Id=rid, **stored) for rid in (a_stored, a_corrupt, a_plain)], account.spark_schema()
    )
    frame = from_arrow(spark, changes.select(RESOLVE_INPUT))
    hand_offs = {"to_spark": 0, "to_driver": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            hand_offs[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(diffs, "from_arrow", counted("to_spark", diffs.from_arrow))
    monkeypatch.setattr(diffs, "to_arrow", counted("to_driver", diffs.to_arrow))
    resolved, counts = diffs.resolve_frame_diffs(changes, frame, current, account)
    assert counts == {"diffs_applied": 2, "diffs_unresolved": 1}
    assert hand_offs == {"to_spark": 1, "to_driver": 1}

    out = {r["Id"]: r for r in fold_changes(resolved, current, account).toArrow().to_pylist()}
    assert out[a_stored]["Description"] == V2
    assert out[a_corrupt]["Description"] == V0 and out[a_corrupt]["Name"] == "Old"  # later change skipped
    assert out[a_corrupt]["_sf_dirty_since"].timestamp() == (T0 + 1000) / 1000
    assert out[a_plain]["Name"] == "no diff here" and out[a_plain]["Description"] == V0

    plain = changes.filter(pc.equal(changes["record_id"], a_plain))
    untouched, none = diffs.resolve_frame_diffs(plain, frame, current, account)
    assert untouched is frame and none == {"diffs_applied": 0, "diffs_unresolved": 0}
