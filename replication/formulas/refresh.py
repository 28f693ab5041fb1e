"""Formula refresh runs: the org's formula values, read with Bulk API 2.0, merged into the replica's formula columns.

Change events never carry formula fields (Change Data Capture Developer Guide: "Formula fields aren't supported in
Change Data Capture"), and a cross-object formula (Contact `Account_Industry__c` = `TEXT(Account.Industry)`)
changes when another record changes, with no event on its own record at all. So formula values are read from the
org on a schedule (`formulas: {refresh_every, full_every}` in replication.yaml; the sensor `formulas_sensor`
requests the runs, the replica asset's `formulas` action (cdc_assets/actions.py), in its pool):

- **The query.** `SELECT Id, <formula fields> FROM X [WHERE SystemModstamp >= :since]` through a Bulk API 2.0
  `query` job (live records: a deleted row keeps the values it had, as it keeps its other fields). A **full pass**
  reads every record: it is the only way to see cross-object changes. An **incremental pass** reads the records
  whose own SystemModstamp moved since the previous refresh read the org (minus `overlap`, for clock skew and
  late commits), and back to the position of any live row that has no formula values yet (a record CDC inserted
  after the refresh that would have read it: it is read now, not at the next full pass). A full pass runs every
  `full_every` (default: every refresh), or when a run asks for it (`formulas_full`). Figures for both in
  bench/RESULTS.md ("Formula refresh").
- **The merge** sets only the formula columns and `_sf_formulas_at` (when the job was asked for: the values are
  the org's as of then) of rows the replica already has: no row is inserted (a record not replicated yet gets its
  values at the next refresh, see above) and no CDC column or system column is written. The other writers, in
  turn, never write formula columns (object_schema/describe.py: they are not in `arrow_schema()`, and a Delta merge
  leaves columns it does not name as they are), so a change event, a reconcile or a poll never overwrites a
  formula value and an insert leaves it null until the next refresh. A resync reads formula values with the
  snapshot (replication/refetch.py): its rows carry the values of that instant.
- **Crash safety.** Rows are merged in batches of `merge_rows`, each commit storing the job's next locator in the
  replica's commit metadata (`FormulaState`, replication/state.py) with the apply app transaction, so a concurrent
  writer of the replica fails one of the two commits. A run killed between commits resumes the same job after the
  last committed page (a job the org no longer has is asked for again); a merge is idempotent (the same values,
  the same `_sf_formulas_at`), so re-reading a batch changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import BUCKET_COLUMN, FORMULAS_AT, ObjectSchema
from replication.apply import APPLY_APP
from replication.formulas.config import FormulasConfig
from replication.formulas.rows import formula_rows, formula_schema
from replication.refetch import SyncResult
from replication.run import ReplicaRun
from replication.state import FormulaJob, FormulaState
from replication.timing import Stopwatch
from resources.delta import DeltaWarehouse, read_table
from resources.salesforce import BulkJobFailed, BulkPosition, SalesforceApiError, SalesforceResource, soql_datetime
from shared.faults import fault_point

log = logging.getLogger(__name__)

COUNTS = (
    "formulas_rows_read",
    "formulas_rows_refreshed",
    "formulas_not_in_replica",
    "formulas_full_pass",
    "formulas_merges",
    "formulas_resumed",
)


@dataclass
class FormulaResult(SyncResult):
    where: str | None = None  # the query's filter (None: a full pass)
    seconds: dict[str, float] = field(default_factory=dict)  # org (job, pages, parsing), merge


def query_hash(schema: ObjectSchema, where: str | None) -> str:
    return hashlib.sha1(f"{schema.name}|{','.join(schema.formula_names)}|{where}".encode()).hexdigest()[:16]


def _due(last: str | None, every: float, now: datetime) -> bool:
    return last is None or (now - datetime.fromisoformat(last)).total_seconds() >= every


def incremental_since(table: DeltaTable, schema: ObjectSchema, state: FormulaState, overlap: float) -> datetime | None:
    """Where an incremental pass starts (None: it cannot, a full pass is needed): the previous refresh's read time,
    or the position of the oldest live row without formula values if older, less `overlap`."""
    if not state.refreshed_at or schema.position_field is None:
        return None
    if FORMULAS_AT not in table.schema().to_arrow().names:  # no refresh ever wrote a value
        return None
    since = datetime.fromisoformat(state.refreshed_at)
    rows = read_table(
        table, columns=["_sf_commit_ts", "_sf_deleted", FORMULAS_AT], filter=pc.field(FORMULAS_AT).is_null()
    )
    live = rows.filter(pc.invert(pc.fill_null(rows["_sf_deleted"], False)))
    if live.num_rows and (oldest := pc.min(live["_sf_commit_ts"]).as_py()) is not None:
        since = min(since, oldest)
    return since - timedelta(seconds=overlap)


class FormulaWriter:
    """Merges formula rows into the replica's formula columns, each batch with the job's position in one commit."""

    def __init__(self, warehouse: DeltaWarehouse, schema: ObjectSchema, state: FormulaState, *, run_id: str):
        self.warehouse, self.schema, self.state, self.run_id = warehouse, schema, state, run_id
        self.counts = dict.fromkeys(COUNTS, 0)
        self.watch = Stopwatch()  # laps: "org" (job, pages, parsing), "merge"

    def merge(self, rows: pa.Table, job: FormulaJob, *, done: bool) -> None:
        self.watch.lap("org")
        state = replace(self.state, job=None if done else job, run_id=self.run_id, counts=self.counts)
        if done:
            state = replace(
                state, refreshed_at=job.read_at, full_at=job.read_at if job.where is None else state.full_at
            )
        table = self.warehouse.reloaded(self.schema.name)  # the snapshot this commit is made against
        txns = {APPLY_APP: table.transaction_version(APPLY_APP) or 0}  # a concurrent replica writer conflicts
        rows = rows.sort_by("Id")  # Id-ordered files: a sorted batch touches those of its Id range
        _, updated = self.warehouse.update_columns(
            self.schema.name,
            rows,
            read=table,
            key_column="Id",
            columns=[*self.schema.formula_names, FORMULAS_AT],
            partition_column=BUCKET_COLUMN,
            partition_values=rows[BUCKET_COLUMN].to_pylist(),
            key=state.KEY,
            state=state.to_dict(),
            txns=txns,
        )
        self.counts["formulas_rows_read"] += rows.num_rows
        self.counts["formulas_rows_refreshed"] += updated
        self.counts["formulas_not_in_replica"] += rows.num_rows - updated
        self.counts["formulas_merges"] += 1
        self.state = state
        self.watch.lap("merge")


def refresh_formulas(run: ReplicaRun, *, full: bool = False) -> FormulaResult:
    """Read the org's formula values and merge them into the replica's formula columns (module docstring); `full`
    forces a full pass."""
    warehouse, salesforce, schema, run_id, now = run.warehouse, run.salesforce, run.schema, run.run_id, run.now
    options, page_size = run.sobject.formulas, run.options.bulk_page_size
    assert options is not None, "a formula refresh runs for an object keeping formula fields (cdc_assets/actions.py)"
    used_before = int(salesforce.api_usage().get("used", 0))
    table = warehouse.table(schema.name)
    if table is None or not schema.formulas:
        log.info("%s: no %s to refresh formulas of", schema.name, "formula fields" if table else "replica yet")
        return FormulaResult(dict.fromkeys(COUNTS, 0))
    state = FormulaState.read(warehouse, table)
    writer = FormulaWriter(warehouse, schema, state, run_id=run_id)
    job, resume = state.job, None
    if job and job.hash != query_hash(schema, job.where):
        log.warning("%s: the interrupted formula job %s read other fields; querying again", schema.name, job.id)
        job = None
    if job:
        writer.counts["formulas_resumed"] = 1
        assert job.id is not None, "a job is committed to the state with the id the org gave it (on_page)"
        resume = BulkPosition(job.id, job.locator)
    else:
        # Without full_every every refresh is a full pass (not "when refresh_every has passed": runs start early).
        full = full or options.full_every is None or _due(state.full_at, options.full_every, now)
        since = None if full else incremental_since(table, schema, state, options.overlap)
        where = f"{schema.position_field} >= {soql_datetime(since)}" if since else None
        job = FormulaJob(id=None, locator=None, where=where, hash=query_hash(schema, where), read_at=now.isoformat())
    writer.counts["formulas_full_pass"] = int(job.where is None)
    try:
        _read(salesforce, schema, job, writer, options, page_size, resume)
    except SalesforceApiError as exc:  # the job to resume is gone (expired, deleted: 404 or 400) or failed
        if resume is None or (exc.status not in (400, 404) and not isinstance(exc, BulkJobFailed)):
            raise
        log.warning("%s: formula job %s can no longer be read (%s); querying again", schema.name, job.id, exc.status)
        job = replace(job, id=None, locator=None, records=0, read_at=now.isoformat())
        _read(salesforce, schema, job, writer, options, page_size, None)
    c = writer.counts
    log.info(
        "%s: %s formula refresh read %d records, refreshed %d rows (%d not in the replica yet) in %d merges",
        schema.name,
        "full" if job.where is None else f"incremental ({job.where})",
        c["formulas_rows_read"],
        c["formulas_rows_refreshed"],
        c["formulas_not_in_replica"],
        c["formulas_merges"],
    )
    writer.watch.lap("org")
    return FormulaResult(
        dict(c),
        int(salesforce.api_usage().get("used", 0)) - used_before,
        where=job.where,
        seconds={f"formulas_{k}": v for k, v in writer.watch.seconds.items()},
    )


def _read(
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    job: FormulaJob,
    writer: FormulaWriter,
    options: FormulasConfig,
    page_size: int,
    resume: BulkPosition | None,
) -> None:
    """Read the job page by page; every `merge_rows` rows (and at its end) merge them with the job's position."""
    buffer: list[pa.RecordBatch] = []
    read_at = datetime.fromisoformat(job.read_at)

    def on_page(position: BulkPosition) -> None:
        nonlocal job
        done = position.locator is None
        if not done and sum(b.num_rows for b in buffer) < options.merge_rows:
            return  # read on: a run killed before the next commit resumes after the last one
        text = pa.Table.from_batches(buffer) if buffer else None
        buffer.clear()
        rows = formula_rows(text, schema, read_at=read_at) if text is not None else formula_schema(schema).empty_table()
        job = replace(job, id=position.job_id, locator=position.locator, records=job.records + rows.num_rows)
        fault_point("formulas.before_commit")
        writer.merge(rows, job, done=done)
        if done:
            fault_point("formulas.after_commit")
        else:
            fault_point("formulas.after_batch_commit")

    for batch in salesforce.bulk_query_all(
        schema.name,
        ["Id", *schema.formula_names],
        page_size=page_size,
        where=job.where,
        resume=resume,
        on_page=on_page,
        include_deleted=False,
    ):
        buffer.append(batch)
