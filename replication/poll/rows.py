"""Polled rows against the replica (pure Arrow): which rows move their record forward, and the cursor they leave.

The rule (docs/design/contract.md §11; replication/poll/run.py, "Position"): a polled row's position is its
SystemModstamp. It replaces the replica row when newer, or at the same SystemModstamp when its values differ
(another transaction in the same millisecond); never when older. A dirty mark newer than the polled state stays.
The cursor is the newest (SystemModstamp, Id) read: Id breaks ties between equal SystemModstamps.

This is not the fold's guard (docs/design/contract.md §5, spark_ops/fold.py `guarded_sql`), which orders a *change*
against a row by commit number and sequence number within a millisecond: a polled state has neither, so at an
equal stamp only its values can tell whether it is news. The two meet in one rule only through the row a poll
writes: a row without a commit number holds everything committed at or before its stamp, so the fold supersedes
the events it already holds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from replication.state import PollPosition

UTC_US = pa.timestamp("us", tz="UTC")


def newest_position(rows: pa.Table, previous: PollPosition | None) -> PollPosition | None:
    """The newest (SystemModstamp, Id) among `rows` and `previous` (Id breaks SystemModstamp ties)."""
    if not rows.num_rows:
        return previous
    ts = pc.max(rows["_sf_commit_ts"]).as_py()
    ids = rows.filter(pc.equal(rows["_sf_commit_ts"], pa.scalar(ts, UTC_US)))["Id"]
    here = PollPosition(ts=ts.isoformat(timespec="microseconds"), id=pc.max(ids).as_py())
    return max(previous, here) if previous else here


def newer_rows(polled: pa.Table, current: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """The polled rows that move their record forward (the rule above), and counts.

    `current` holds the replica rows of the polled ids. A dirty row stays dirty when its gap is newer than the
    polled state.
    """
    cur = current.select(["Id", "_sf_commit_ts", "_sf_dirty_since"]).rename_columns(["Id", "_cur_ts", "_cur_dirty"])
    joined = polled.join(cur, "Id", join_type="left outer")
    missing = pc.is_null(joined["_cur_ts"])
    newer = pc.or_kleene(missing, pc.greater(joined["_sf_commit_ts"], joined["_cur_ts"]))
    same = pc.fill_null(pc.equal(joined["_sf_commit_ts"], joined["_cur_ts"]), False)
    keep = pc.fill_null(newer, False)
    if pc.any(same).as_py():  # another transaction in the same millisecond: write it if the values differ
        keep = pc.or_(keep, differs(joined, current, same))
    out = joined.filter(keep)
    still_dirty = pc.fill_null(pc.greater(out["_cur_dirty"], out["_sf_commit_ts"]), False)
    dirty = pc.if_else(still_dirty, out["_cur_dirty"], pa.scalar(None, UTC_US))
    out = out.set_column(out.schema.get_field_index("_sf_dirty_since"), "_sf_dirty_since", dirty)
    counts = {
        "inserted": int(pc.sum(pc.is_null(out["_cur_ts"])).as_py() or 0),
        "cleaned": int(pc.sum(pc.and_(pc.is_valid(out["_cur_dirty"]), pc.invert(still_dirty))).as_py() or 0),
    }
    return out.select(polled.column_names).cast(polled.schema), counts


def differs(joined: pa.Table, current: pa.Table, same: pa.Array) -> pa.Array:
    """Per joined row: true where a row at the same position as its replica row has other values (compared in
    Python: only the rows at the same position, few)."""
    compared = [c for c in joined.column_names if not c.startswith("_") or c == "_sf_deleted"]
    candidates = joined.filter(same).select(compared)
    by_id = {r["Id"]: r for r in current.select(compared).to_pylist()}
    differing = [r["Id"] for r in candidates.to_pylist() if r != by_id.get(r["Id"])]
    return pc.and_(same, pc.is_in(joined["Id"], value_set=pa.array(differing, pa.string())))
