"""Reconcile dirty records and resync whole objects from the org (docs/design/contract.md §6, §7), and initial loads.

**Resync** (also the initial load of an object with no table): a Bulk API 2.0 `queryAll` of the replicated fields (and
the formula fields of a replica that keeps them, replication/formulas/) is staged page by page (CSV -> Arrow -> Parquet,
in bounded batches that a killed run continues) and swapped into the replica by one commit (`replication/snapshot.py`);
rows of records the result no longer contains follow as soft-deleted. The commit moves the apply checkpoint back to
just before the overflow, so the apply step that follows re-folds every event since then over the snapshot: the
per-record guard skips events at or before each record's SystemModstamp and applies the newer ones.

**Reconcile**: dirty records are fetched by id with sObject Collections (2,000 ids a call); ids that come back null
are looked up with `queryAll` (deleted or gone: both end deleted). Two kinds of id leave the dirty set with a count
instead of a record, so that no landed line can stop the object's reconciliation or pass unnoticed:

- ids the org *refuses* (MALFORMED_ID: an id without an id's form, or with a wrong case-safe suffix): a call
  holding one fails whole, so they are isolated (`SalesforceResource.retrieve`), never asked with queryAll, and
  their rows marked deleted (`ids_refused`);
- ids the org *does not know* (null from the retrieve, absent from queryAll: a record hard-deleted before the
  reconcile, or an id a writer invented): marked deleted as docs/design/contract.md §6 says (`reconciled_gone`).

Both are recorded with examples in the replica state (`Reconciled`), and the `org_knows_ids` check
(cdc_assets/checks.py) fails for any refused id or more unknown ones than it allows.

The fetched rows are the org's current state and win outright: they are written in one merge commit that also clears
the dirty flags, whatever the replica row held. No change event is folded over them: every event ingested up to the
apply checkpoint was delivered, so committed, before the fetch, and is already in the fetched state, whatever its
timestamp says. (Comparing stamps instead would let a fetched row whose SystemModstamp is older than the replica row's
`_sf_commit_ts` lose to an event it already contains; a real org stamps a transaction before it commits, so stamps are
not commit order.) Events ingested later, and held transactions, are folded over the reconciled rows by the apply step
that follows, by the per-record guard: those at or before the fetched SystemModstamp are superseded, newer ones
applied.

Both leave the table as a re-run would make it: the overwrite and the merge are single commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from simple_salesforce import format_soql

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP
from replication.closure import replay_from, resynced
from replication.field_access import carry_kept, kept_fields
from replication.formulas.rows import with_formulas
from replication.records import RECONCILE, SNAPSHOT, mark_deleted, records_to_text, replica_rows
from replication.run import ReplicaRun
from replication.schemas import describe_note, keep_describe, stored_describe
from replication.snapshot import (
    StageState,
    discard_stage,
    stage_app,
    stage_missing,
    stage_name,
    stage_snapshot,
    staged_files,
    swapped_at,
)
from replication.state import UNKNOWN_ID_EXAMPLES, Reconciled, ReplicaState
from resources.delta import aligned_arrow, next_version
from resources.salesforce import BulkPosition, SalesforceResource, select_soql
from shared.faults import fault_point

log = logging.getLogger(__name__)

QUERY_ALL_CHUNK = 200  # ids per queryAll (keeps the SOQL well under URL limits)
BULK_PAGE_SIZE = 50_000  # records per Bulk API 2.0 result page (maxRecords); replication.yaml options.bulk_page_size


@dataclass
class SyncResult:
    """What a step that reads the org did: its counts and the API calls it spent. Which step it was (the
    materialization's `mode`) is the run action's to say (cdc_assets/actions.py)."""

    counts: dict[str, int] = field(default_factory=dict)
    api_calls: int = 0


def _api_used(salesforce: SalesforceResource) -> int:
    return int(salesforce.api_usage().get("used", 0))


def resync(run: ReplicaRun) -> SyncResult:
    """Replace the replica with a Bulk API 2.0 snapshot, staged in bounded batches (resumable), swapped in by one
    commit (replication/snapshot.py), in pages and batches as replication.yaml's options say; the org read
    (replication/org.py) is recorded in the commit."""
    warehouse, salesforce, schema, now = run.warehouse, run.salesforce, run.schema, run.now
    run_id, describe, options, org = run.run_id, run.describe, run.options, run.org()
    page_size, parallel_pages, batch_records = (
        options.bulk_page_size,
        options.bulk_parallel_pages,
        options.resync_batch_records,
    )
    used_before = _api_used(salesforce)
    replica = warehouse.table(schema.name)
    prev = ReplicaState.read(warehouse, replica)
    # The snapshot replays every event since the overflow (an initial load: every event ever ingested).
    replay = replay_from(prev, (replica.transaction_version(APPLY_APP) or 0) if replica is not None else None)
    # With formula columns (formulas on): read with the snapshot. With the columns of fields the org no longer
    # serves (hidden or deleted, replication/field_access.py): carried over from the replica, never asked for.
    kept = kept_fields(replica, schema)
    target = pa.schema([*schema.table_arrow_schema(), *kept])
    fields = [*schema.org_fields, *schema.formula_names]

    def pages(resume: BulkPosition | None, on_page) -> Iterator[pa.Table]:
        for batch in salesforce.bulk_query_all(
            schema.name, fields, page_size=page_size, parallel_pages=parallel_pages, resume=resume, on_page=on_page
        ):
            text = pa.Table.from_batches([batch])
            rows = with_formulas(replica_rows(text, schema, source=SNAPSHOT, synced_at=now), text, schema, read_at=now)
            yield carry_kept(warehouse, replica, rows, kept) if kept and replica is not None else rows
            fault_point("resync.after_first_page")

    stage = warehouse.table(stage_name(schema.name))
    if stage is not None and (at := swapped_at(replica, stage)) is not None:  # swapped in; its cleanup was not done
        counts = dict(StageState.read(warehouse, stage).counts or {})  # read before its log goes
        discard_stage(warehouse, schema.name)
        assert replica is not None, "swapped_at finds a swap only in an existing replica"
        if _only_properties_since(replica, at):  # this resync's own swap, killed before the cleanup: it is done
            return SyncResult(counts, 0)
        # An earlier resync's, and the replica has moved on since: this resync stages its own snapshot.
    stage, staged = stage_snapshot(
        warehouse, schema.name, target, run_id=run_id, pages=pages, batch_records=batch_records
    )
    fault_point("resync.after_snapshot_stream")
    stage, staged = stage_missing(warehouse, schema.name, stage, staged, replica, target, now=now)
    fault_point("resync.after_missing_marked_deleted")
    state = ReplicaState(
        applied_through=replay - 1,
        run_id=run_id,
        synced_at=now.isoformat(),
        last_commit_ts=prev.last_commit_ts,
        poll=prev.poll,  # a polled object keeps its cursor
        resynced=resynced(prev, now),
        org=org or prev.org,
    )
    fault_point("resync.before_commit")
    # Against `replica`, the snapshot the checkpoint came from: a concurrent writer fails this commit.
    table = warehouse.commit_files(
        schema.name,
        staged_files(stage),
        read=replica,
        schema=pa.schema(stage.schema().to_arrow()),
        partition_by=[BUCKET_COLUMN],
        description=describe_note(describe),
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: replay - 1, stage_app(stage): next_version(replica)},
        configuration=schema.table_properties(),
    )
    if replica is not None and describe and stored_describe(warehouse, schema.name, table=table) != describe:
        keep_describe(table, describe)
    fault_point("resync.after_commit")
    discard_stage(warehouse, schema.name)
    counts = dict(staged.counts or {})
    log.info(
        "%s: resync wrote %d snapshot rows (%d deleted in the org), %d rows no longer in the org marked deleted",
        schema.name,
        counts.get("snapshot_rows", 0),
        counts.get("snapshot_deleted", 0),
        counts.get("missing_marked_deleted", 0),
    )
    return SyncResult(counts, _api_used(salesforce) - used_before)


def _only_properties_since(table: DeltaTable, version: int) -> bool:
    """Whether every commit after `version` only set table properties (as a resync does after its swap)."""
    later = table.history(table.version() - version) if table.version() > version else []
    return all(c.get("operation") == "SET TBLPROPERTIES" for c in later)


def reconcile(run: ReplicaRun) -> SyncResult:
    """Fetch dirty records from the org and write them as they are there, clearing the flags: one merge commit.
    Which org is read (replication/org.py; it refuses another org's) is asked only when there are dirty records to
    fetch, and recorded in the commit."""
    warehouse, salesforce, schema, now = run.warehouse, run.salesforce, run.schema, run.now
    replica = warehouse.table(schema.name)
    if replica is None:
        return SyncResult({"dirty_fetched": 0})
    dirty = aligned_arrow(warehouse.read(replica, filter=pc.field("_sf_dirty_since").is_valid()), schema.arrow_schema())
    if not dirty.num_rows:
        return SyncResult({"dirty_fetched": 0})
    identity = run.org() if run.org is not None else None
    used_before = _api_used(salesforce)
    fault_point("reconcile.after_dirty_read")
    fetched = _fetch_dirty(run, dirty)
    fault_point("reconcile.after_fold")  # the rows are final (the name predates the rule: nothing is folded)
    prev = ReplicaState.read(warehouse, replica)
    refused_examples = [f"{i!r}: {e}" for i, e in sorted(fetched.refused.items())[:UNKNOWN_ID_EXAMPLES]]
    state = replace(
        prev,
        run_id=run.run_id,
        synced_at=now.isoformat(),
        reconciled=Reconciled(
            at=now.isoformat(),
            records=dirty.num_rows,
            unknown=len(fetched.gone),
            unknown_examples=fetched.gone[:UNKNOWN_ID_EXAMPLES],
            refused=len(fetched.refused),
            refused_examples=refused_examples,
        ),
        org=identity or prev.org,
    )
    fault_point("reconcile.before_commit")
    warehouse.commit_rows(
        schema.name,
        fetched.rows,
        read=replica,
        key_column="Id",
        partition_column=BUCKET_COLUMN,
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: replica.transaction_version(APPLY_APP) or 0},
    )
    fault_point("reconcile.after_commit")
    counts = {
        "dirty_fetched": dirty.num_rows,
        "reconciled_found": fetched.found,
        "reconciled_deleted": fetched.deleted,
        "reconciled_gone": len(fetched.gone),
        "ids_refused": len(fetched.refused),
    }
    log.info(
        "%s: reconciled %d dirty records (%d found, %d deleted in the org, %d gone, %d ids refused by the org)",
        schema.name,
        *counts.values(),
    )
    return SyncResult(counts, _api_used(salesforce) - used_before)


@dataclass(frozen=True)
class Fetched:
    """What the org says of a replica's dirty records: the rows to write (the org's current state: it wins, module
    docstring), how many it returned and how many it holds deleted, the ids it knows nothing of (`gone`) and those
    it refused, with its error."""

    rows: pa.Table
    found: int
    deleted: int
    gone: list[str]
    refused: dict[str, str]


def _fetch_dirty(run: ReplicaRun, dirty: pa.Table) -> Fetched:
    """The org's rows for the `dirty` replica rows: retrieved by id; those it does not return, asked of queryAll
    (deleted, in the recycle bin); the rest, gone or refused, leave the dirty set as deleted."""
    salesforce, schema, now = run.salesforce, run.schema, run.now
    ids = dirty["Id"].to_pylist()
    fields = [f for f in schema.org_fields if f != "IsDeleted"]  # a retrieved record is not deleted
    refused: dict[str, str] = {}  # id -> the org's error (module docstring)
    fetched = list(salesforce.retrieve(schema.name, ids, fields, refused=refused))
    found = [r for r in fetched if r is not None]
    missing = [i for i, r in zip(ids, fetched) if r is None and i not in refused]
    fault_point("reconcile.after_retrieve")
    parts = [replica_rows(records_to_text(found, fields), schema, source=RECONCILE, synced_at=now)] if found else []
    deleted_in_org = _query_deleted(salesforce, schema, missing)
    fault_point("reconcile.after_query_all")
    if deleted_in_org:
        parts.append(
            replica_rows(
                records_to_text(deleted_in_org, [*fields, "IsDeleted"]), schema, source=RECONCILE, synced_at=now
            )
        )
    gone = sorted(set(missing) - {r["Id"] for r in deleted_in_org})
    if gone or refused:  # neither is a record the org has: both leave the dirty set, deleted
        unknown = pa.array(gone + sorted(refused), pa.string())
        parts.append(
            mark_deleted(
                dirty.filter(pc.is_in(dirty["Id"], value_set=unknown)), at=now, source=RECONCILE, synced_at=now
            )
        )
    rows = pa.concat_tables(parts).cast(schema.arrow_schema())
    return Fetched(rows, len(found), len(deleted_in_org), gone, refused)


def _query_deleted(salesforce: SalesforceResource, schema: ObjectSchema, ids: list[str]) -> list[dict]:
    """Records among `ids` that queryAll still returns (deleted, in the recycle bin)."""
    found: list[dict] = []
    fields = list(schema.org_fields)
    for start in range(0, len(ids), QUERY_ALL_CHUNK):
        where = format_soql("Id IN {}", ids[start : start + QUERY_ALL_CHUNK])
        found.extend(salesforce.query_all(select_soql(schema.name, fields, where=where)))
    return found
