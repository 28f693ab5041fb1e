"""New versions onto a history table's current versions (pure pyarrow; no I/O).

- `history_schema`: the replica's columns, then `_valid_from`, `_valid_to`, `_is_current`, `_version`,
  `_transaction_key`, `_change_type`.
- `sync_versions`: rows a sync wrote (resync, initial load, reconcile, poll; or, for a replica version the history
  has no staged versions of, whatever it wrote) -> the versions they make: a clean row (not dirty) whose data
  columns or deleted flag differ from the record's current version, or a record without one. A resync that finds
  a record as it was makes no version; the change type says what happened to the record (CREATE, UPDATE, DELETE,
  UNDELETE), `_sf_source` how it was learnt.
- `chain`: the rows one history commit merges: each touched record's current version, closed where its first new
  version opens, and the new versions, numbered on from it (`_version`), each closed by the next. `_valid_from` is
  the version's `_sf_commit_ts`, never below the version before it (a reconcile may fetch a record whose
  SystemModstamp is older than the change the replica last applied: README "Operating it"), so validity intervals
  never overlap and never leave a hole.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from resources.delta import aligned_arrow
from spark_ops.history import CHANGE_TYPE, TRANSACTION_KEY
from spark_ops.order import arrow_order

VALID_FROM, VALID_TO, IS_CURRENT, VERSION = "_valid_from", "_valid_to", "_is_current", "_version"
TS = pa.timestamp("us", tz="UTC")
HISTORY_COLUMNS = [
    pa.field(VALID_FROM, TS),
    pa.field(VALID_TO, TS),
    pa.field(IS_CURRENT, pa.bool_()),
    pa.field(VERSION, pa.int64()),
    pa.field(TRANSACTION_KEY, pa.string()),
    pa.field(CHANGE_TYPE, pa.string()),
]
DELETED = "_sf_deleted"


def history_schema(replica: pa.Schema) -> pa.Schema:
    return pa.schema([*replica, *HISTORY_COLUMNS])


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))


def sync_versions(written: pa.Table, current: pa.Table, data_columns: list[str], target: pa.Schema) -> pa.Table:
    """The versions that replica rows `written` make over the records' `current` versions (module docstring)."""
    written = aligned_arrow(written, target)
    written = written.filter(pc.is_null(written["_sf_dirty_since"]))
    if not written.num_rows:
        return target.empty_table()
    current = aligned_arrow(current, target)
    compared = [c for c in [*data_columns, DELETED] if c != "Id"]
    left = pa.table({"Id": written["Id"], **{f"{c}__new": written[c] for c in compared}})
    right = pa.table(
        {
            "Id": current["Id"],
            "_present": pa.repeat(True, current.num_rows),
            **{f"{c}__old": current[c] for c in compared},
        }
    )
    both = (
        left.append_column("_row", pa.array(range(written.num_rows), pa.int64()))
        .join(right, keys="Id", join_type="left outer")
        .sort_by("_row")
    )
    present = pc.fill_null(both["_present"], False)
    same = pa.repeat(True, both.num_rows)
    for c in compared:
        same = pc.and_(same, _same(both[f"{c}__new"], both[f"{c}__old"]))
    keep = pc.invert(pc.and_(present, same))
    rows = written.take(pc.filter(both["_row"], keep))
    was, now = pc.filter(both[f"{DELETED}__old"], keep), pc.fill_null(rows[DELETED], False)
    had = pc.filter(present, keep)
    was_deleted = pc.fill_null(was, False)
    change = pc.case_when(
        pc.make_struct(pc.invert(had), pc.and_(pc.invert(was_deleted), now), pc.and_(was_deleted, pc.invert(now))),
        pa.scalar("CREATE"),
        pa.scalar("DELETE"),
        pa.scalar("UNDELETE"),
    )
    change = pc.if_else(pc.and_(pc.invert(had), now), pa.scalar("DELETE"), pc.fill_null(change, "UPDATE"))
    return rows.set_column(target.get_field_index(CHANGE_TYPE), target.field(CHANGE_TYPE), change)


def chain(current: pa.Table, versions: pa.Table, target: pa.Schema) -> pa.Table:
    """The rows to merge into the history by (`Id`, `_version`): `current` versions of the touched records,
    closed, and `versions` with their validity and numbers (module docstring). Both aligned to `target`."""
    versions = aligned_arrow(versions, target)
    if not versions.num_rows:
        return target.empty_table()
    current = aligned_arrow(current, target)
    last = {
        i: (v, n)
        for i, v, n in zip(current["Id"].to_pylist(), current[VALID_FROM].to_pylist(), current[VERSION].to_pylist())
    }
    versions = versions.take(arrow_order(versions, group_by=["Id"], kept=True))  # by record, then commit order
    ids, stamps = versions["Id"].to_pylist(), versions["_sf_commit_ts"].to_pylist()
    valid_from, number = [], []
    for rid, ts in zip(ids, stamps):
        before, n = last.get(rid, (None, 0))
        start = max(ts, before) if before is not None and ts is not None else (ts if ts is not None else before)
        valid_from.append(start)
        number.append(n + 1)
        last[rid] = (start, n + 1)
    valid_to = [valid_from[k + 1] if k + 1 < len(ids) and ids[k + 1] == rid else None for k, rid in enumerate(ids)]
    columns = {
        VALID_FROM: pa.array(valid_from, TS),
        VALID_TO: pa.array(valid_to, TS),
        IS_CURRENT: pa.array([t is None for t in valid_to]),
        VERSION: pa.array(number, pa.int64()),
    }
    for name, values in columns.items():
        versions = versions.set_column(target.get_field_index(name), target.field(name), values)
    first: dict[str, datetime | None] = {}  # valid_from of each record's first new version
    for rid, start in zip(ids, valid_from):
        first.setdefault(rid, start)
    touched = current.filter(pc.is_in(current["Id"], value_set=pa.array(list(first), pa.string())))
    closes = pa.array([first[i] for i in touched["Id"].to_pylist()], TS)
    touched = touched.set_column(target.get_field_index(VALID_TO), target.field(VALID_TO), closes)
    touched = touched.set_column(
        target.get_field_index(IS_CURRENT), target.field(IS_CURRENT), pa.repeat(False, touched.num_rows)
    )
    return pa.concat_tables([touched, versions])
