"""The replication semantics as a plain loop over events: the oracle the property tests compare replicas with.

Deliberately naive and independent of spark_ops: no windows, no batches, no runs. It states what the replica must
hold once every event has been applied in commit order (docs/design/contract.md §3-§6, as spark_ops/fold.py implements
them):

- one change per (event, record id); an event is identified by (entity, transaction key, sequence number,
  change type), so the same change seen twice counts once;
- changes apply in commit order: (commit timestamp, commit number, sequence number, replay id);
- CREATE / UNDELETE reset the row: the fields they carry, every other field null, not deleted;
- UPDATE overwrites the fields it carries (None sets null) and keeps the others;
- DELETE sets `_sf_deleted` and `_sf_deleted_at`, keeping the field values;
- a GAP_* event makes its record dirty (`_sf_dirty_since` = the gap's commit time; a row appears for an unknown
  id); no later change of a dirty record is applied;
- an UPDATE or DELETE that is the first change of a record never seen is applied, but makes the record dirty;
- `_sf_commit_ts` is the commit time of the last change applied to the row.

GAP_OVERFLOW and wildcard ids (whole-object resync, §7) are outside this model and are skipped.

Input events are dicts with `entity, record_ids, change_type, commit_ts` (epoch ms), `commit_number,
transaction_key, sequence_number, replay_id, fields` (flattened component names; an explicit None nulls).
Timestamps in the output are timezone-aware UTC datetimes; field values are left as the events carry them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

SYSTEM_COLUMNS = ("_sf_deleted", "_sf_deleted_at", "_sf_commit_ts", "_sf_dirty_since")
RESETS = {"CREATE", "UNDELETE"}


def as_utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def distinct_changes(events: Iterable[dict]) -> list[tuple[dict, str]]:
    """(event, record id) pairs, first occurrence of each (entity, transaction, sequence, type, record) kept."""
    seen: set[tuple] = set()
    changes = []
    for event in events:
        for rid in event["record_ids"]:
            key = (event["entity"], event["transaction_key"], event["sequence_number"], event["change_type"], rid)
            if key not in seen:
                seen.add(key)
                changes.append((event, rid))
    return changes


def position(event: dict) -> tuple:
    """Commit order: commit timestamp, commit number, sequence number, replay id."""
    return (event["commit_ts"], event["commit_number"], event["sequence_number"], event.get("replay_id") or 0)


def fold(events: Iterable[dict], columns: Mapping[str, Sequence[str]] | None = None) -> dict[str, dict[str, dict]]:
    """{entity: {record id: row}} after applying `events`.

    A row holds `Id`, its fields and the system columns. With `columns` ({entity: replica field names}), every
    row holds every listed field (null unless set); without, only the fields some applied change set.
    """
    tables: dict[str, dict[str, dict]] = {}

    def new_row(entity: str, rid: str) -> dict:
        row = dict.fromkeys((columns or {}).get(entity, ()))
        row.update(
            {"Id": rid, "_sf_deleted": False, "_sf_deleted_at": None, "_sf_commit_ts": None, "_sf_dirty_since": None}
        )
        return row

    def clear_fields(row: dict) -> None:
        for name in row:
            if name != "Id" and name not in SYSTEM_COLUMNS:
                row[name] = None

    for event, rid in sorted(distinct_changes(events), key=lambda change: position(change[0])):
        entity, change_type, at = event["entity"], event["change_type"], as_utc(event["commit_ts"])
        if change_type == "GAP_OVERFLOW" or rid.endswith("*"):
            continue
        rows = tables.setdefault(entity, {})
        row = rows.get(rid)

        if change_type.startswith("GAP_"):
            row = rows.setdefault(rid, new_row(entity, rid))
            if row["_sf_dirty_since"] is None:
                row["_sf_dirty_since"] = at
            continue
        if row is not None and row["_sf_dirty_since"] is not None:
            continue  # dirty: left for reconciliation
        if row is None:
            row = rows[rid] = new_row(entity, rid)
            if change_type not in RESETS:
                row["_sf_dirty_since"] = at  # a partial change of a record never seen

        if change_type in RESETS:
            clear_fields(row)
            row["_sf_deleted"], row["_sf_deleted_at"] = False, None
        if change_type == "DELETE":
            row["_sf_deleted"], row["_sf_deleted_at"] = True, at
        else:
            row.update(event["fields"])
        row["_sf_commit_ts"] = at
    return tables
