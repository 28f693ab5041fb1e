"""Polling replication for objects without Change Data Capture (`source: poll` in replication.yaml).

The same replica table, columns and checks as a CDC object; only where the rows come from differs. Each run reads
the records changed since a cursor, `SELECT <fields>, IsDeleted, SystemModstamp FROM X WHERE SystemModstamp >=
:since ORDER BY SystemModstamp, Id` through `queryAll` (deleted rows included), and merges them into the replica.
The cursor field is the object's own (`cursor_field`, from describe(); `poll_cursor_field` in the metadata):
SystemModstamp, else LastModifiedDate (share objects), else CreatedDate (field history objects, never changed);
an object without IsDeleted (setup objects: no recycle bin) is queried without it. SystemModstamp below stands for
that field.

- **Position.** A polled row's position is its SystemModstamp (`_sf_commit_ts`, `_sf_source = 'poll'`). It replaces
  the replica row only when newer, or at the same SystemModstamp when its values differ (another transaction
  committed in the same millisecond): an older row never overwrites a newer one, and a re-read row is not written
  again. That one rule makes the inclusive re-query safe (the boundary record comes back and is skipped, so runs
  neither duplicate nor loop, whatever the number of records sharing a SystemModstamp: no query has a LIMIT that
  a burst could fill except the small-delta probe, which then hands over to Bulk), and lets CDC events and polled
  rows meet in one table (spark_ops/fold.py treats a polled row like a snapshot row: events at or before it are
  superseded).
- **Overlap.** `since` is the cursor minus `poll_overlap` (default 5 min): a row committed late, with a
  SystemModstamp older than rows already polled, is still read by the next runs.
- **Small deltas** are read with one REST `queryAll` (`LIMIT rest_max_records`); a full page means a bigger delta,
  read through a Bulk API 2.0 `queryAll` job instead, one Delta commit per result page.
- **The cursor lives in the replica's Delta commit** (`ReplicaState.poll`, replication/state.py), as the CDC checkpoint
  does: the newest (SystemModstamp, Id) read, and while a Bulk job is being read, the job id, the next page's
  locator, the query's hash and `since`, the records read and the newest position so far (the Aiven connector's
  offset). A run killed between pages resumes the same job from the locator instead of querying again; a job the
  org no longer has (expired, deleted) is queried again from the same `since` (idempotent by the rule above).
- **Deletes.** `IsDeleted` rows set `_sf_deleted` (undeletes clear it: newer rows). Records purged from the recycle
  bin vanish from `queryAll` without a trace: every `hard_delete_check_every` seconds a run compares the replica's
  Ids with the org's, both ways (replication/poll/compare.py): purged records are soft-deleted (bounded by
  `poll_max_delete_share`), records committed later than the overlap and records that reappeared are fetched.
- **Switching sources.** cdc -> poll: with no cursor yet, polling starts at the replica's newest `_sf_commit_ts`
  minus the overlap. poll -> cdc: the first cdc run polls once more (`handoff`) and then applies the change events
  ingested since the apply checkpoint; those at or before a polled row's SystemModstamp are superseded, newer ones
  applied. No reload either way.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP, EVENT_COUNTS, ApplyResult
from replication.config import PollOptions
from replication.poll.compare import COUNTS as COMPARE_COUNTS
from replication.poll.compare import compare_ids
from replication.poll.rows import newer_rows, newest_position
from replication.records import POLL, records_to_text, replica_rows
from replication.refetch import SyncResult
from replication.run import ReplicaRun
from replication.state import BulkJob, PollPosition, PollState, ReplicaState
from replication.timing import Stopwatch
from resources.delta import DeltaWarehouse, aligned_arrow, read_table
from resources.salesforce import (
    BulkJobFailed,
    BulkPosition,
    SalesforceApiError,
    SalesforceResource,
    select_soql,
    soql_datetime,
)
from shared.faults import fault_point

log = logging.getLogger(__name__)


def cursor_field(schema: ObjectSchema) -> str:
    """The field polling reads changes by: SystemModstamp, else LastModifiedDate, else CreatedDate (describe())."""
    if schema.position_field is None:
        raise RuntimeError(
            f"{schema.name} has no SystemModstamp, LastModifiedDate or CreatedDate (describe()): it "
            f"cannot be polled; leave it out of replication.yaml"
        )
    return schema.position_field


def order_by(schema: ObjectSchema) -> str:
    return f"{cursor_field(schema)}, Id"


COUNTS = (
    "poll_rows_read",
    "poll_rows_written",
    "poll_inserted",
    "poll_deleted",
    "poll_pages",
    "poll_bulk",
    "poll_resumed",
    *COMPARE_COUNTS,
)


@dataclass
class PollResult(SyncResult):
    cursor: PollPosition | None = None
    cursor_field: str | None = None  # the field the cursor is a position in (cursor_field)
    seconds: dict[str, float] = field(default_factory=dict)  # org: queries and pages; read/merge: the replica
    commits: int = 0  # Delta commits the poll made
    next: dict = field(default_factory=dict)  # what the next poll reads (`next_poll`): the poll sensor's probe


def polled_result(warehouse: DeltaWarehouse, name: str, sync: SyncResult | None) -> ApplyResult:
    """The replica's state after a poll, as an apply result with no events (for the shared metadata)."""
    table = warehouse.table(name)
    counts = dict.fromkeys((*EVENT_COUNTS, "rows_written"), 0)
    return ApplyResult(
        counts=counts,
        state=ReplicaState.read(warehouse, table),
        table=table,
        version=table.version() if table is not None else None,
        committed=sync is not None and (not isinstance(sync, PollResult) or sync.commits > 0),
        seconds=sync.seconds if isinstance(sync, PollResult) else {},
    )


def poll_state(warehouse: DeltaWarehouse, table: DeltaTable | None) -> PollState | None:
    """The poll cursor of the replica's newest commit (None: not polled, or CDC took over)."""
    return ReplicaState.read(warehouse, table).poll


def state_to_poll_from(warehouse: DeltaWarehouse, table: DeltaTable | None) -> PollState:
    """The replica's poll state, its last Id comparison moved up to its last resync or initial load: a snapshot read
    every record the org had when it started (`Resynced.at`), so the replica's Ids matched the org's then as after a
    comparison. Without it the first poll after an initial load would compare every object's Ids with the org at
    once (a Bulk job each) though the load just read them all."""
    replica = ReplicaState.read(warehouse, table)
    state = replica.poll or PollState()
    snapshot = replica.resynced.at if replica.resynced else None
    if snapshot and (
        state.ids_compared_at is None
        or datetime.fromisoformat(snapshot) > datetime.fromisoformat(state.ids_compared_at)
    ):
        return replace(state, ids_compared_at=snapshot)
    return state


def _since(table, state: PollState, options: PollOptions) -> datetime | None:
    """Where the next query starts: the cursor (or, after CDC, the replica's newest position) minus the overlap."""
    if state.cursor:
        start = datetime.fromisoformat(state.cursor.ts)
    else:
        newest = pc.max(read_table(table, columns=["_sf_commit_ts"])["_sf_commit_ts"]).as_py()
        if newest is None:
            return None
        start = newest
    return start - timedelta(seconds=options.overlap)


class PollWriter:
    """Merges polled pages into the replica, each with the poll state, in one commit per page."""

    def __init__(self, warehouse: DeltaWarehouse, schema: ObjectSchema, *, run_id: str, now: datetime):
        self.warehouse, self.schema, self.run_id, self.now = warehouse, schema, run_id, now
        self.target = schema.arrow_schema()
        self.counts = dict.fromkeys(COUNTS, 0)
        self.commits = 0
        self.watch = Stopwatch()  # laps: "org" (queries, pages, parsing), "read" (current rows), "merge"

    def current(self, table: DeltaTable, ids: list[str]) -> pa.Table:
        buckets = sorted({i[: self.schema.bucket_chars] for i in ids})
        rows = self.warehouse.read_keys(table, key_column="Id", keys=ids, partitions=[(BUCKET_COLUMN, "in", buckets)])
        return aligned_arrow(rows, self.target)

    def write(self, rows: pa.Table, poll: PollState, *, force: bool, guard: bool = True) -> tuple[pa.Table, dict]:
        """Merge the rows of `rows` that move their record forward (all of them without `guard`); commit them with
        `poll` as the new cursor state (also with nothing to write when `force`). Returns the rows written and
        counts (`inserted`: new records, `cleaned`: dirty rows made clean)."""
        self.watch.lap("org")
        fresh = rows
        c: dict[str, int] = {}
        # One snapshot for the current rows, the state and the commit: a writer racing this one fails safely.
        table = self.warehouse.reloaded(self.schema.name)  # poll() refuses an object with no replica
        if rows.num_rows:
            current = self.current(table, rows["Id"].to_pylist())
            if guard:
                fresh, c = newer_rows(rows, current)
            else:
                c = {"inserted": rows.num_rows - current.num_rows}
        self.watch.lap("read")
        if not fresh.num_rows and not force:
            return fresh, c
        state = replace(
            ReplicaState.read(self.warehouse, table), run_id=self.run_id, synced_at=self.now.isoformat(), poll=poll
        )
        if fresh.num_rows:
            state = state.with_commit_ts(pc.max(fresh["_sf_commit_ts"]).as_py().isoformat())
        txns = {APPLY_APP: table.transaction_version(APPLY_APP) or 0}
        self.warehouse.commit_rows(
            self.schema.name,
            fresh if fresh.num_rows else self.target.empty_table(),
            read=table,
            key_column="Id",
            partition_column=BUCKET_COLUMN,
            key=state.KEY,
            state=state.to_dict(),
            txns=txns,
        )
        self.commits += 1
        self.watch.lap("merge")
        return fresh, c

    def write_polled(self, rows: pa.Table, poll: PollState, *, force: bool) -> None:
        """`write` for rows read from the org, counted."""
        self.counts["poll_rows_read"] += rows.num_rows
        written, c = self.write(rows, poll, force=force)
        self.counts["poll_rows_written"] += written.num_rows
        self.counts["poll_inserted"] += c.get("inserted", 0)
        if written.num_rows:
            self.counts["poll_deleted"] += int(pc.sum(written["_sf_deleted"]).as_py() or 0)


def query_hash(schema: ObjectSchema, fields: list[str], where: str | None) -> str:
    return hashlib.sha1(f"{schema.name}|{','.join(fields)}|{where}|{order_by(schema)}".encode()).hexdigest()[:16]


def poll(
    run: ReplicaRun, *, compare_ids: bool = False, confirm_deletes: bool = False, handoff: bool = False
) -> PollResult:
    """Bring the replica up to date with the org's records changed since the cursor (module docstring).

    `compare_ids` forces the Id comparison (otherwise due every `hard_delete_check_every` seconds; compare.py),
    `confirm_deletes` too, and lets it delete more than `max_delete_share` of the live records;
    `handoff` is the last poll before CDC takes over (the cursor is kept, marked inactive).
    """
    warehouse, salesforce, schema, now = run.warehouse, run.salesforce, run.schema, run.now
    options = run.sobject.poll
    used_before = int(salesforce.api_usage().get("used", 0))
    table = warehouse.table(schema.name)
    if table is None:
        raise RuntimeError(f"{schema.name}: no replica table to poll into; its first run is an initial load")
    field_name = cursor_field(schema)
    state, job = _starting_point(schema, state_to_poll_from(warehouse, table), field_name)
    base = replace(state, job=None, active=not handoff, cursor_field=field_name)
    writer = PollWriter(warehouse, schema, run_id=run.run_id, now=now)
    if job:
        _resume_bulk(run, job, writer, base)
    else:
        _read_changed(run, table, state, writer, base)
    base = state_to_poll_from(warehouse, warehouse.table(schema.name))
    if compare_ids or confirm_deletes or _due(base.ids_compared_at, options.hard_delete_check_every, now):
        _compare(salesforce, schema, writer, base, options, now, confirm_deletes)
    after = state_to_poll_from(warehouse, warehouse.table(schema.name))
    log.info(
        "%s: polled %d rows, %d written (%d new, %d deleted), %d purged records found; cursor %s",
        schema.name,
        writer.counts["poll_rows_read"],
        writer.counts["poll_rows_written"],
        writer.counts["poll_inserted"],
        writer.counts["poll_deleted"],
        writer.counts["hard_deleted"],
        after.cursor,
    )
    writer.watch.lap("org")
    return PollResult(
        writer.counts,
        int(salesforce.api_usage().get("used", 0)) - used_before,
        cursor=after.cursor,
        cursor_field=field_name,
        commits=writer.commits,
        seconds={f"poll_{k}": v for k, v in writer.watch.seconds.items()},
        next=next_poll(after, field_name, read_at=now),
    )


def _starting_point(schema: ObjectSchema, state: PollState, field_name: str) -> tuple[PollState, BulkJob | None]:
    """Where the poll starts: the committed state, less a cursor kept in another field than describe() now gives
    (polled again behind the replica's newest row) and an interrupted Bulk job that queried other fields; the job to
    resume, if any."""
    job = state.job
    if state.cursor and state.cursor_field not in (None, field_name):
        log.warning(
            "%s: the cursor was a %s, describe() now gives %s: polling again behind the replica's newest row",
            schema.name,
            state.cursor_field,
            field_name,
        )
        state, job = replace(state, cursor=None), None
    if job and job.hash != query_hash(schema, schema.org_fields, job.where):
        log.warning("%s: the interrupted Bulk job %s queried other fields; querying again", schema.name, job.id)
        job = None
    return state, job


def _resume_bulk(run: ReplicaRun, job: BulkJob, writer: PollWriter, base: PollState) -> None:
    """Read on from the interrupted Bulk job's committed page; a job the org no longer serves is queried again."""
    salesforce, schema, options, fields = run.salesforce, run.schema, run.sobject.poll, run.schema.org_fields
    writer.counts["poll_resumed"] = 1
    try:
        assert job.id is not None, "a job is committed to the state with the id the org gave it (on_page)"
        _read_bulk(salesforce, schema, fields, job, writer, base, options, resume=BulkPosition(job.id, job.locator))
    except SalesforceApiError as exc:  # gone (expired, deleted: 404, or 400) or failed in the org
        if exc.status not in (400, 404) and not isinstance(exc, BulkJobFailed):
            raise
        log.warning(
            "%s: Bulk job %s can no longer be read (%s); querying again from %s",
            schema.name,
            job.id,
            exc.status,
            job.where,
        )
        _read_bulk(salesforce, schema, fields, replace(job, locator=None, records=0), writer, base, options)


def _read_changed(run: ReplicaRun, table: DeltaTable, state: PollState, writer: PollWriter, base: PollState) -> None:
    """The records changed since the cursor (less the overlap): through REST when fewer than `rest_max_records`,
    committed at once, else a Bulk job read page by page."""
    salesforce, schema, options, fields = run.salesforce, run.schema, run.sobject.poll, run.schema.org_fields
    since = _since(table, state, options)
    where = f"{base.cursor_field} >= {soql_datetime(since)}" if since else None
    records = list(
        salesforce.query_all(
            select_soql(schema.name, fields, where=where, order_by=order_by(schema), limit=options.rest_max_records)
        )
    )
    if len(records) >= options.rest_max_records:
        job = BulkJob(id=None, locator=None, where=where, hash=query_hash(schema, fields, where))
        _read_bulk(salesforce, schema, fields, job, writer, base, options)
        return
    rows = replica_rows(records_to_text(records, fields), schema, source=POLL, synced_at=run.now)
    cursor = newest_position(rows, state.cursor)
    writer.counts["poll_pages"] = 1
    # Nothing new and no hand-off: no commit (an idle poll leaves the table as it was).
    changed = cursor != state.cursor or base.active != state.active
    writer.write_polled(rows, replace(base, cursor=cursor), force=changed)
    fault_point("poll.after_rest_commit")


def next_poll(state: PollState, field_name: str, *, read_at: datetime) -> dict:
    """What the poll sensor needs to ask the org cheaply whether the next poll of the object has anything to read
    (sensors/poll.py): the `cursor` (the newest position read, in the query field `field`), when this poll read
    (`read_at`), whether a Bulk job is still being read (`resume`: it must run) and the last Id comparison
    (`ids_compared_at`: one is due every `hard_delete_check_every`).

    Why "a record newer than the cursor" is the whole question once a poll has read `poll_overlap` seconds after the
    cursor: the overlap is how late a record may become visible after its SystemModstamp (module docstring), so by
    then every record at or before the cursor was visible to that poll, which read them; what is left to read is
    newer than the cursor."""
    return {
        "cursor": soql_datetime(datetime.fromisoformat(state.cursor.ts)) if state.cursor else None,
        "field": field_name,
        "read_at": read_at.isoformat(),
        "resume": state.job is not None,
        "ids_compared_at": state.ids_compared_at,
    }


def _read_bulk(
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    fields: list[str],
    job: BulkJob,
    writer: PollWriter,
    base: PollState,
    options: PollOptions,
    resume: BulkPosition | None = None,
) -> None:
    """Read a Bulk queryAll job page by page; each page commits its rows with the job's position."""
    writer.counts["poll_bulk"] = 1
    buffer: list[pa.RecordBatch] = []

    def on_page(position: BulkPosition) -> None:
        nonlocal job
        text = pa.Table.from_batches(buffer) if buffer else None
        buffer.clear()
        rows = (
            replica_rows(text, schema, source=POLL, synced_at=writer.now)
            if text is not None
            else schema.arrow_schema().empty_table()
        )
        job = replace(
            job,
            id=position.job_id,
            locator=position.locator,
            records=job.records + rows.num_rows,
            max=newest_position(rows, job.max),
        )
        writer.counts["poll_pages"] += 1
        if position.locator is None:  # the job is read: its newest position is the cursor
            cursor = max(filter(None, [base.cursor, job.max]), default=None)
            writer.write_polled(rows, replace(base, cursor=cursor, job=None), force=True)
        else:
            writer.write_polled(rows, replace(base, job=job), force=False)
            fault_point("poll.after_page_commit")

    for batch in salesforce.bulk_query_all(
        schema.name,
        fields,
        page_size=options.page_size,
        where=job.where,
        order_by=order_by(schema),
        resume=resume,
        on_page=on_page,
    ):
        buffer.append(batch)


def _due(last: str | None, every: float, now: datetime) -> bool:
    return last is None or (now - datetime.fromisoformat(last)).total_seconds() >= every


def _compare(
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    writer: PollWriter,
    base: PollState,
    options: PollOptions,
    now: datetime,
    confirm: bool,
) -> None:
    """The Id comparison (replication/poll/compare.py), committed with its poll state."""
    table = writer.warehouse.reloaded(schema.name)  # poll() refuses an object with no replica
    result = compare_ids(
        salesforce,
        schema,
        table,
        base,
        current=lambda ids: writer.current(table, ids),
        now=now,
        max_share=options.max_delete_share,
        confirm=confirm,
    )
    fault_point("poll.after_id_compare")
    writer.write(result.rows, result.state, force=True, guard=False)  # compare_ids chose the rows
    writer.counts |= result.counts
    if result.state.refused:
        r = result.state.refused
        log.warning(
            "%s: the Id comparison would soft-delete %d of %d live records (more than %.1f %%): refused; "
            "if the org really lost them, run the replica with config confirm_deletes: true",
            schema.name,
            r.records,
            r.live,
            100 * r.max_share,
        )
    if result.state.late_found:
        log.warning(
            "%s: the Id comparison found %d records committed later than the poll overlap (%g s): raise "
            "poll_overlap for this object",
            schema.name,
            result.state.late_found,
            options.overlap,
        )
