"""The poll merge rule on Arrow rows: older never overwrites newer, a re-read row is not written again, the same
SystemModstamp with other values is written, and the cursor breaks SystemModstamp ties by Id."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from object_schema.describe import ObjectSchema
from replication.poll.rows import newer_rows, newest_position
from replication.records import records_to_text, replica_rows
from replication.state import PollPosition

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIELDS = ["Id", "Name", "IsDeleted", "SystemModstamp"]


def rows(schema: ObjectSchema, *records: tuple[str, str, str]) -> pa.Table:
    text = records_to_text(
        [{"Id": i, "Name": n, "IsDeleted": False, "SystemModstamp": ts} for i, n, ts in records], FIELDS
    )
    return replica_rows(text, schema, source="poll", synced_at=NOW)


def test_only_rows_that_move_their_record_forward_are_written(sample_dir):
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    current = rows(
        schema,
        ("001A", "a", "2026-01-01T10:00:00.000Z"),
        ("001B", "b", "2026-01-01T10:00:00.000Z"),
        ("001C", "c", "2026-01-01T10:00:00.000Z"),
        ("001D", "d", "2026-01-01T10:00:05.000Z"),
    )
    polled = rows(
        schema,
        ("001A", "a2", "2026-01-01T10:00:01.000Z"),  # newer: written
        ("001B", "b", "2026-01-01T10:00:00.000Z"),  # re-read, same values: not written again
        ("001C", "c2", "2026-01-01T10:00:00.000Z"),  # same millisecond, other transaction: written
        ("001D", "d0", "2026-01-01T10:00:04.000Z"),  # older than the replica row: never written
        ("001E", "e", "2026-01-01T10:00:02.000Z"),
    )  # unknown: inserted
    written, counts = newer_rows(polled, current)
    assert sorted(written["Id"].to_pylist()) == ["001A", "001C", "001E"]
    assert counts["inserted"] == 1


def test_the_cursor_is_the_newest_systemmodstamp_then_the_highest_id(sample_dir):
    schema = ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    polled = rows(
        schema,
        ("001B", "b", "2026-01-01T10:00:02.000Z"),
        ("001C", "c", "2026-01-01T10:00:02.000Z"),
        ("001A", "a", "2026-01-01T10:00:01.000Z"),
    )
    assert newest_position(polled, None) == PollPosition(ts="2026-01-01T10:00:02.000000+00:00", id="001C")
    older = PollPosition(ts="2026-01-01T09:00:00.000000+00:00", id="001Z")
    assert newest_position(polled, older).id == "001C"
    assert newest_position(polled.slice(0, 0), older) == older
