"""A resync's (or initial load's) Bulk snapshot, staged: written in bounded batches with a resumable position, then
swapped into the replica in one commit (docs/design/contract.md §7).

Why not one streaming overwrite: delta-rs keeps a Parquet writer open per partition until its write ends, and a
replica has a partition per `_sf_bucket` (records created together), so that write held the whole table in memory
(3.9 GB for 1M records of 64 columns), and a run that died near the end started the Bulk query over.

1. **Stage.** Result pages are appended, about `batch_records` records at a time, to a staging Delta table inside
   the replica's folder (`<replica>/resync_stage`; no commit of the replica names its files, so its readers never
   see them). Each append ends its writers (memory: one batch) and commits, with the rows, where the Bulk job's
   reading stands after them (`StageState`: job id, next locator). A run that dies continues the same job from the
   last batch committed (a job keeps its results and locators until deleted); a job the org no longer has (404)
   starts the stage over.
2. **Missing.** Records of the replica that the snapshot lacks are appended to the stage, marked deleted.
3. **Swap.** One commit of the replica adds the staged files (with the statistics delta-rs computed for them) and
   removes every file it had (`DeltaTable.create_write_transaction`, overwrite), with the replica's state and
   checkpoint, against the snapshot the run read: readers see the old table or the new one, never a mix. The
   stage's log is then deleted; its files now belong to the replica (vacuum removes them once a later version
   drops them). A crash between the swap and the cleanup leaves a stage whose files the replica already holds:
   the next run only cleans up. (The swap commits an app transaction naming the stage, `stage_app`: that is how
   a later run knows, whatever merges or compaction did to the files since.)
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from object_schema.describe import BUCKET_COLUMN
from replication.records import SNAPSHOT, mark_deleted
from replication.state import _CommitState
from resources.delta import DeltaWarehouse, aligned_arrow, arrow_dataset
from resources.salesforce import BulkPosition, SalesforceApiError
from resources.storage import filesystem, join
from shared.faults import fault_point

log = logging.getLogger(__name__)

STAGE_DIR = "resync_stage"
STAGE_BATCH_RECORDS = 250_000
MISSING_CHUNK_RECORDS = 1_000_000  # replica records whose Ids are compared with the snapshot's at a time


@dataclass(frozen=True)
class StageState(_CommitState):
    """What each commit of a stage stores: the Bulk job it reads and where the reading stands after the rows
    staged so far (`locator` None and `fetched`: every page is staged), and whether the missing records are."""

    KEY: ClassVar[str] = "cdc.resync_stage"
    job_id: str = ""
    locator: str | None = None
    fetched: bool = False
    missing_marked: bool = False
    run_id: str = ""
    counts: dict[str, int] | None = None


def stage_name(name: str) -> str:
    return f"{name}/{STAGE_DIR}"


def stage_snapshot(
    warehouse: DeltaWarehouse,
    name: str,
    target: pa.Schema,
    *,
    run_id: str,
    pages: Callable[[BulkPosition | None, Callable[[BulkPosition], None]], Iterator[pa.Table]],
    batch_records: int = STAGE_BATCH_RECORDS,
) -> tuple[DeltaTable, StageState]:
    """Stage every page `pages(resume, on_page)` yields (replica rows, `target` schema), continuing a stage a
    killed run left; returns the stage and its state (`fetched`)."""
    stage = warehouse.table(stage_name(name))
    state = StageState.read(warehouse, stage)
    if state.fetched:
        assert stage is not None, "a fetched state is read from the stage's own log"
        return stage, state
    resume = BulkPosition(state.job_id, state.locator) if stage is not None and state.job_id else None
    if resume is not None:
        log.info(
            "%s: resuming the resync's Bulk job %s from locator %s (%d records staged)",
            name,
            state.job_id,
            state.locator,
            (state.counts or {}).get("snapshot_rows", 0),
        )
    counts = dict(state.counts or {"snapshot_rows": 0, "snapshot_deleted": 0})
    buffered: list[pa.Table] = []

    def commit(position: BulkPosition) -> None:
        nonlocal stage, state
        if sum(t.num_rows for t in buffered) < batch_records and position.locator is not None:
            return
        rows = pa.concat_tables(buffered) if buffered else target.empty_table()
        counts["snapshot_rows"] += rows.num_rows
        counts["snapshot_deleted"] += int(pc.sum(rows["_sf_deleted"]).as_py() or 0)
        state = StageState(
            job_id=position.job_id,
            locator=position.locator,
            fetched=position.locator is None,
            run_id=run_id,
            counts=dict(counts),
        )
        stage = warehouse.append(
            stage_name(name),
            rows,
            read=stage,
            partition_by=[BUCKET_COLUMN],
            key=state.KEY,
            state=state.to_dict(),
            txns={},
        )
        buffered.clear()
        fault_point("resync.after_stage_batch")

    try:
        for rows in pages(resume, commit):
            buffered.append(rows)
    except SalesforceApiError as exc:
        if resume is None or exc.status != 404:
            raise
        log.warning("%s: the Bulk job %s of the staged resync is gone from the org; staging again", name, state.job_id)
        discard_stage(warehouse, name)
        return stage_snapshot(warehouse, name, target, run_id=run_id, pages=pages, batch_records=batch_records)
    assert stage is not None, "the last page's on_page (locator None) commits the stage"
    return stage, state


def stage_missing(
    warehouse: DeltaWarehouse,
    name: str,
    stage: DeltaTable,
    state: StageState,
    replica: DeltaTable | None,
    target: pa.Schema,
    *,
    now: datetime,
) -> tuple[DeltaTable, StageState]:
    """Append to the stage the replica's records the snapshot lacks, marked deleted (once)."""
    if state.missing_marked:
        return stage, state
    gone = (
        [
            mark_deleted(aligned_arrow(old, target), at=now, source=SNAPSHOT, synced_at=now)
            for old in _missing(warehouse, replica, stage)
        ]
        if replica is not None
        else []
    )
    rows = aligned_arrow(pa.concat_tables(gone), target) if gone else target.empty_table()
    counts = dict(state.counts or {}) | {"missing_marked_deleted": rows.num_rows}
    state = replace(state, missing_marked=True, counts=counts)
    stage = warehouse.append(
        stage_name(name), rows, read=stage, partition_by=[BUCKET_COLUMN], key=state.KEY, state=state.to_dict(), txns={}
    )
    return stage, state


def _missing(warehouse: DeltaWarehouse, replica: DeltaTable, stage: DeltaTable) -> Iterator[pa.Table]:
    """The replica's rows whose Id the stage lacks, compared a few buckets at a time: a record's bucket is a prefix
    of its Id, the same in the replica and the stage, so memory holds about `MISSING_CHUNK_RECORDS` Ids, not the
    table's."""
    for buckets in _bucket_chunks(replica, MISSING_CHUNK_RECORDS):
        where = [(BUCKET_COLUMN, "in", buckets)]
        old = arrow_dataset(replica, prune=where).to_table(columns=["Id"])["Id"]
        new = arrow_dataset(stage, prune=where).to_table(columns=["Id"])["Id"].combine_chunks()
        if len(ids := old.filter(pc.invert(pc.is_in(old, value_set=new)))):
            yield warehouse.read_keys(replica, key_column="Id", keys=ids.to_pylist(), partitions=where)


def _bucket_chunks(table: DeltaTable, chunk_records: int) -> Iterator[list[str]]:
    """The table's buckets in groups of about `chunk_records` records (from the log's per-file record counts)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return
    sizes = actions.group_by(f"partition.{BUCKET_COLUMN}").aggregate([("num_records", "sum")])
    chunk: list[str] = []
    held = 0
    for bucket, records in zip(sizes[f"partition.{BUCKET_COLUMN}"].to_pylist(), sizes["num_records_sum"].to_pylist()):
        if chunk and held + (records or 0) > chunk_records:
            yield chunk
            chunk, held = [], 0
        chunk.append(bucket)
        held += records or 0
    yield chunk


def staged_files(stage: DeltaTable) -> list[AddAction]:
    """The stage's files as add actions of the replica (paths relative to the replica's folder)."""
    actions = pa.table(stage.get_add_actions(flatten=False)).to_pylist()
    return [
        AddAction(
            path=f"{STAGE_DIR}/{a['path']}",
            size=a["size_bytes"],
            partition_values=a["partition"],
            modification_time=a["modification_time"],
            data_change=True,
            stats=_stats(a),
        )
        for a in actions
    ]


def stage_app(stage: DeltaTable) -> str:
    """The app transaction id the swap of `stage` commits to the replica (unique to this stage's table)."""
    return f"cdc_resync_stage_{stage.metadata().id}"


def swapped_at(replica: DeltaTable | None, stage: DeltaTable) -> int | None:
    """The replica version that swapped `stage` in (None: not swapped). Held by the replica's app transactions,
    so later merges, compaction or Z-ordering of the swapped files do not hide it."""
    return replica.transaction_version(stage_app(stage)) if replica is not None else None


def discard_stage(warehouse: DeltaWarehouse, name: str) -> None:
    """Delete the stage's log (its files stay for the replica or for vacuum; unreferenced, readers never see them)."""
    fs, path = filesystem(join(warehouse.uri(stage_name(name)), "_delta_log"))
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        if isinstance(fs, pafs.LocalFileSystem):
            shutil.rmtree(path)
        else:
            fs.delete_dir(path)


def _stats(action: dict) -> str:
    """Delta file statistics (numRecords, nullCount, minValues, maxValues) from delta-rs' flattened add action."""
    return json.dumps(
        {
            "numRecords": action["num_records"],
            "nullCount": {k: v for k, v in (action.get("null_count") or {}).items() if v is not None},
            "minValues": _values(action.get("min")),
            "maxValues": _values(action.get("max")),
        }
    )


def _values(values: dict | None) -> dict:
    out = {}
    for key, value in (values or {}).items():
        if isinstance(value, datetime):
            # Delta keeps timestamps in statistics at millisecond precision; a truncated maximum would rule out
            # files holding the value, so timestamps are left out (readers then open those files).
            continue
        if isinstance(value, date):
            value = value.isoformat()
        if value is not None:
            out[key] = value
    return out
