"""The Id comparison of a polled object with the org, both ways: what the cursor query cannot see.

Every `hard_delete_check_every` seconds (or when a run asks: `compare_ids`, `confirm_deletes`) one Bulk `queryAll` of
`Id` (and `IsDeleted` when the object has it) lists every record the org holds, and the replica's Ids are set
against it:

- **Purged** (a live replica row whose Id the org no longer has at all: emptied from the recycle bin) is
  soft-deleted at the comparison's time (`hard_deleted`). These deletes are bounded: a comparison that would delete
  more than `poll_max_delete_share` of the live records (a sharing change hid them, a partial result) deletes
  nothing, keeps the refusal in the poll state (`PollState.refused`, the `poll_hard_deletes` check fails) and counts
  them in `hard_delete_refused`, until a run with `confirm_deletes` applies it (or a later comparison comes out
  under the bound).
- **Late** (a record live in the org the replica has never seen, at or behind the cursor: committed with a
  SystemModstamp older than the cursor minus `poll_overlap`, so no cursor query will return it) is fetched by id (sObject Collections, 2,000
  ids a call) and inserted (`poll_late_found`). It means the overlap is too short for this org: the count is kept in
  the poll state and the `poll_overlap` check fails until a comparison finds none.
- **Reappeared** (a record live in the org whose replica row is deleted at a position at or after the org's
  SystemModstamp) is fetched and restored (`poll_restored`), whatever its SystemModstamp: no delete in the org
  leaves a record live and unchanged since (a delete and an undelete both move SystemModstamp), so that delete was
  inferred (an earlier comparison that did not see it) and was wrong.

Records the org holds deleted are left to the cursor query (their delete moved SystemModstamp).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import ObjectSchema
from replication.poll.rows import newer_rows
from replication.records import POLL, mark_deleted, records_to_text, replica_rows
from replication.state import PollState, RefusedDeletes
from resources.delta import aligned_arrow, read_table
from resources.salesforce import SalesforceResource

COUNTS = ("hard_delete_checked", "hard_deleted", "hard_delete_refused", "poll_late_found", "poll_restored")


@dataclass(frozen=True)
class OrgIds:
    """The org's Ids from one comparison query: all of them (deleted ones too), and the live ones."""

    all: pa.Array
    live: pa.Array


def org_ids(salesforce: SalesforceResource, schema: ObjectSchema) -> OrgIds:
    has_deleted = "IsDeleted" in schema.org_fields
    fields = ["Id", "IsDeleted"] if has_deleted else ["Id"]
    batches = list(salesforce.bulk_query_all(schema.name, fields, page_size=500_000))
    if not batches:
        empty = pa.array([], pa.string())
        return OrgIds(empty, empty)
    table = pa.Table.from_batches(batches)
    ids = table["Id"].combine_chunks()
    if not has_deleted:
        return OrgIds(ids, ids)
    live = pc.invert(pc.fill_null(pc.equal(pc.utf8_lower(table["IsDeleted"]), "true"), False))
    return OrgIds(ids, ids.filter(live.combine_chunks()))


def replica_ids(table: DeltaTable) -> pa.Table:
    """Id and _sf_deleted of every replica row."""
    rows = read_table(table, columns=["Id", "_sf_deleted"])
    return pa.table({"Id": rows["Id"].cast(pa.string()), "_sf_deleted": pc.fill_null(rows["_sf_deleted"], False)})


def fetch(salesforce: SalesforceResource, schema: ObjectSchema, ids: list[str], now: datetime) -> pa.Table:
    """Live records of `ids` by id (2,000 a call), as polled rows; ids the org no longer has live are left out."""
    fields = [f for f in schema.org_fields if f != "IsDeleted"]  # a retrieved record is live
    found = [r for r in salesforce.retrieve(schema.name, ids, fields) if r is not None]
    if not found:
        return schema.arrow_schema().empty_table()
    return replica_rows(records_to_text(found, fields), schema, source=POLL, synced_at=now)


@dataclass
class Comparison:
    rows: pa.Table  # rows to write: purged ones soft-deleted (unless refused), late and reappeared ones fetched
    state: PollState
    counts: dict[str, int]


def compare_ids(
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    table: DeltaTable,
    base: PollState,
    *,
    current: Callable[[list[str]], pa.Table],
    now: datetime,
    max_share: float,
    confirm: bool,
) -> Comparison:
    """The rows one comparison writes, the poll state it leaves, and its counts (module docstring).
    `current(ids)` reads the replica rows of `ids`; `base.cursor` is where the poll before it left the cursor."""
    target = schema.arrow_schema()
    org = org_ids(salesforce, schema)
    replica = replica_ids(table)
    live = replica.filter(pc.invert(replica["_sf_deleted"]))
    gone_ids = live["Id"].filter(pc.invert(pc.is_in(live["Id"], value_set=org.all)))
    missing = pc.invert(pc.is_in(org.live, value_set=replica["Id"]))
    late_ids = org.live.filter(missing).to_pylist()
    deleted = replica.filter(replica["_sf_deleted"])
    reappeared_ids = deleted["Id"].filter(pc.is_in(deleted["Id"], value_set=org.live)).to_pylist()

    counts = dict.fromkeys(COUNTS, 0)
    counts["hard_delete_checked"] = 1
    parts: list[pa.Table] = []
    refused = None
    share = len(gone_ids) / live.num_rows if live.num_rows else 0.0
    if len(gone_ids) and share > max_share and not confirm:
        refused = RefusedDeletes(at=now.isoformat(), records=len(gone_ids), live=live.num_rows, max_share=max_share)
        counts["hard_delete_refused"] = len(gone_ids)
    elif len(gone_ids):
        gone = aligned_arrow(current(gone_ids.to_pylist()), target)
        parts.append(mark_deleted(gone, at=now, source=POLL, synced_at=now))
        counts["hard_deleted"] = gone.num_rows

    if late_ids:
        late = fetch(salesforce, schema, late_ids, now)
        if base.cursor:  # created after the poll's query: the next query returns them (they are not late)
            cursor_ts = datetime.fromisoformat(base.cursor.ts)
            late = late.filter(pc.less_equal(late["_sf_commit_ts"], pa.scalar(cursor_ts, late["_sf_commit_ts"].type)))
        written, c = newer_rows(late, aligned_arrow(current(late_ids), target))
        parts.append(written)
        counts["poll_late_found"] = c.get("inserted", 0)
    if reappeared_ids:
        back = fetch(salesforce, schema, reappeared_ids, now)
        if back.num_rows:
            restored = _restored(back, aligned_arrow(current(back["Id"].to_pylist()), target))
            parts.append(restored)
            counts["poll_restored"] = restored.num_rows

    rows = pa.concat_tables([p.cast(target) for p in parts]) if parts else target.empty_table()
    state = replace(
        base,
        ids_compared_at=now.isoformat(),
        hard_deleted=base.hard_deleted + counts["hard_deleted"],
        late_found=counts["poll_late_found"],
        refused=refused,
    )
    return Comparison(rows, state, counts)


def _restored(fetched: pa.Table, current: pa.Table) -> pa.Table:
    """Fetched live rows whose replica row is deleted at or after the org's SystemModstamp (or that are newer)."""
    cur = current.select(["Id", "_sf_commit_ts", "_sf_deleted"]).rename_columns(["Id", "_cur_ts", "_cur_deleted"])
    joined = fetched.join(cur, "Id", join_type="inner")
    keep = pc.or_(
        pc.fill_null(pc.greater(joined["_sf_commit_ts"], joined["_cur_ts"]), False),
        pc.fill_null(joined["_cur_deleted"], False),
    )
    return joined.filter(keep).select(fetched.column_names).cast(fetched.schema)
