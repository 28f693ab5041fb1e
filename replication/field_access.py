"""Columns whose field the org no longer serves the integration user: hidden by field-level security, or deleted.

Both look the same from the integration user's side: describe() no longer lists the field, change events leave it
out, and any SOQL, Bulk query or sObject Collections retrieve naming it fails with ``INVALID_FIELD`` "No such
column" (Change Data Capture Developer Guide, "Field-Level Security": "Delivered events contain only the fields that
a subscribed user is allowed to view"). What tells them apart is the change event schema, which "includes all object
fields, even the fields that the user doesn't have access to" (REST ``sobjects/<Object>ChangeEvent/eventSchema``,
``SalesforceResource.event_schema_fields``): a field still in it is **hidden**, one gone from it too **removed**.

Either way the replica keeps the column and the values it has (docs/design/contract.md §8: columns are added, never
dropped): the column leaves the object's schema (`resolve_schema` does not add it back), so it is never asked of the
org (no run fails), and no writer names it; a Delta merge leaves a column it does not name as it is, and a row it
inserts gets null there. A resync carries the kept values into its snapshot (replication/refetch.py). The table
property ``cdc.field_access`` records each such column (``{"<Field>": {"status": "hidden" | "removed", "since":
<ISO time>, "type": <Salesforce type>}}``), the materialization reports them (``fields_hidden``,
``fields_removed``), and the check ``fields_readable`` fails while a field is hidden: the replica no longer follows
it, and only an admin of the org can give the integration user read access back.

When is the org asked? describe() is asked again (`settle_field_access`) when a run copies the object anyway (a
resync or initial load), when a read of the org failed with ``INVALID_FIELD`` (the run then asks, marks, and reads
again without the field), and on every run while a field is marked hidden (one describe call, to see whether read
access came back). A hidden field that comes back in describe() is a column again and is **backfilled** for that
column alone: a Bulk API 2.0 ``queryAll`` of ``Id`` and the returned fields, written into those columns of the rows
the replica has (no other column), so changes made while it was hidden (which no event carried) are in the replica
again. A record the org returns that the replica does not have yet (its create event not applied: it may carry no
value of the field either) is inserted **dirty** with those columns, so the reconcile reads it whole and the events
it skips meanwhile lose nothing. A removed field that describe() lists again (a new field under its name, or the old one restored),
and a field whose type changed beyond what its column holds, have their column rewritten with the org's type and
values (replication/retype.py); `cdc.field_access` then records them `retyped` or `recreated`, followed, no longer
kept apart (`NOT_FOLLOWED`: replication/schemas.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Schema

from object_schema.describe import BUCKET_COLUMN, ObjectSchema
from replication.apply import APPLY_APP
from replication.config import SObjectConfig
from replication.org import org_for_run
from replication.retype import RECREATED, RETYPED, columns_to_follow, follow_columns, org_values
from replication.run import ReplicaRun
from replication.schemas import (
    FIELD_ACCESS_PROPERTY,
    NOT_FOLLOWED,
    field_marks,
    keep_describe,
    marked_fields,
    resolve_schema,
    stored_describe,
)
from replication.state import ReplicaState
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceApiError, SalesforceResource

log = logging.getLogger(__name__)
Run = TypeVar("Run", bound=ReplicaRun)  # the Dagster side's run (with its op config) comes back as it went in

HIDDEN, REMOVED = "hidden", "removed"
PENDING = "pending"  # in a followed column's entry: its rewrite is recorded, not done yet


def is_invalid_field(exc: BaseException) -> bool:
    """Whether an org read failed because it named a field the org does not serve (deleted, or hidden by FLS)."""
    return isinstance(exc, SalesforceApiError) and "INVALID_FIELD" in exc.body


@dataclass
class FieldAccess:
    """What the run knows of the replica's hidden and removed columns, and what it did about them."""

    hidden: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    retyped: list[str] = field(default_factory=list)  # rewritten this run with the org's new type
    recreated: list[str] = field(default_factory=list)  # rewritten this run: a new field under the old name
    returned: list[str] = field(default_factory=list)  # read again this run, and backfilled
    added: list[str] = field(default_factory=list)  # new columns this run, and backfilled
    backfilled: int = 0  # rows whose returned columns were written

    @classmethod
    def of(cls, marks: dict[str, dict]) -> FieldAccess:
        return cls(
            hidden=sorted(n for n, m in marks.items() if m.get("status") == HIDDEN),
            removed=sorted(n for n, m in marks.items() if m.get("status") == REMOVED),
        )


def _data_columns(table: DeltaTable, schema: ObjectSchema) -> dict[str, pa.DataType]:
    formulas = set(schema.formula_names)
    return {
        f.name: f.type
        for f in pa.schema(table.schema().to_arrow())
        if not f.name.startswith("_sf_") and f.name not in formulas
    }


def _classify(salesforce: SalesforceResource, name: str, gone: list[str], describe: dict | None) -> dict[str, str]:
    """hidden or removed, for each column whose field describe() no longer lists (module docstring). A component
    of a compound field counts by its parent (the event schema nests it). Without a change event to ask about (an
    object without CDC), a field cannot be told hidden: it is marked removed."""
    in_events = salesforce.event_schema_fields(name)
    if in_events is None:
        log.warning("%s: no change event schema to tell hidden fields from deleted ones: %s marked removed", name, gone)
        return dict.fromkeys(gone, REMOVED)
    parents = {f["name"]: f.get("compoundFieldName") for f in (describe or {}).get("fields", [])}
    return {c: HIDDEN if c in in_events or parents.get(c) in in_events else REMOVED for c in gone}


def _drifted(
    sobject: SObjectConfig, table: DeltaTable, schema: ObjectSchema, describe: dict, entries: dict[str, dict]
) -> bool:
    """Whether the describe() kept with the table already says a column must follow its field (replication/retype.py):
    asked again by an earlier run (events set an unknown field) that did not rewrite the column then, or a rewrite
    recorded and not done (`PENDING`: the run ended between the two). No API call."""
    if _pending(entries):
        return True
    wanted = {f.name: f.type for f in sobject.schema_of(describe).arrow_schema()}
    removed = {c for c, m in entries.items() if m.get("status") == REMOVED}
    return bool(columns_to_follow(_data_columns(table, schema), wanted, removed))


def _pending(entries: dict[str, dict]) -> dict[str, str]:
    """Column -> how it follows, for the rewrites `cdc.field_access` records as not done yet."""
    return {c: m["status"] for c, m in entries.items() if m.get(PENDING) and m.get("status") in (RETYPED, RECREATED)}


def _followed_marks(
    follow: dict[str, str],
    entries: dict[str, dict],
    stored: dict[str, pa.DataType],
    current: dict,
    version: int,
    now: datetime,
) -> dict[str, dict]:
    """What `cdc.field_access` records of the columns rewritten this run, `PENDING` until the rewrite is done: how,
    since when, the Salesforce type, the column's type before, and the replica version of the rewrite (a rewrite
    recorded by an earlier run that ended before doing it keeps what that run recorded)."""
    types = {f["name"]: f["type"] for f in current["fields"]}
    out = {}
    for c, how in follow.items():
        earlier = entries.get(c, {})
        if earlier.get(PENDING):
            out[c] = {**earlier, "type": types[c], "version": version}
        else:
            out[c] = {
                "status": how,
                "since": now.isoformat(),
                "type": types[c],
                "column": str(stored[c]),
                "version": version,
                PENDING: True,
            }
    return out


def _done(entries: dict[str, dict]) -> dict[str, dict]:
    return {c: {k: v for k, v in m.items() if k != PENDING} for c, m in entries.items()}


def _date_and_announce(name: str, new_marks: dict[str, dict], marks: dict[str, dict], now: datetime) -> None:
    """Date the new marks from now (a mark kept keeps its date) and say which columns the org stopped serving."""
    for c, mark in new_marks.items():
        mark["since"] = mark["since"] or now.isoformat()
        if marks.get(c, {}).get("status") != mark["status"]:
            log.warning(
                "%s.%s: the org %s; the replica keeps the column with its values, and never asks the org for it",
                name,
                c,
                "hides it from the integration user (field-level security)"
                if mark["status"] == HIDDEN
                else "no longer has it (deleted)",
            )


def settle_field_access(run: Run, *, fresh: bool = False, force: bool = False) -> tuple[Run, FieldAccess]:
    """The run with the replica's schema once its hidden and removed columns are known (module docstring): marks
    the columns whose field describe() no longer lists, backfills those that came back, rewrites those whose field
    changed type or was created again (replication/retype.py), keeps the describe() asked with the table. `fresh`:
    the run's describe() is the org's, asked this run; `force`: ask the org even if nothing is marked hidden (a
    read failed with INVALID_FIELD, or gave a value its column cannot hold). Returns the run with its schema, its
    describe() and its table after that, and what was done."""
    sobject, warehouse, salesforce, table = run.sobject, run.warehouse, run.salesforce, run.table
    schema, describe, now, run_id = run.schema, run.describe or {}, run.now, run.run_id
    entries = field_marks(table)
    marks = {c: m for c, m in entries.items() if m.get("status") in NOT_FOLLOWED}
    if table is None or sobject.describe_path or salesforce is None:
        return run, FieldAccess.of(marks)
    drifted = not (fresh or force) and _drifted(sobject, table, schema, describe, entries)
    if not (fresh or force or drifted or any(m.get("status") == HIDDEN for m in marks.values())):
        return run, FieldAccess.of(marks)
    kept = stored_describe(warehouse, sobject.name, table=table) or describe  # as the table last knew the org
    current = describe if fresh else salesforce.describe_fresh(sobject.name)
    listed = {f["name"] for f in current["fields"]}
    types = {f["name"]: f["type"] for f in (kept or {}).get("fields", [])}
    selected = sobject.schema_of(current)
    stored = _data_columns(table, schema)
    gone = [c for c in stored if c not in listed and selected.selects(c)]
    removed = {c for c, m in marks.items() if m.get("status") == REMOVED}
    # A full copy writes every column with the org's type anyway; any other run rewrites those that must follow.
    wanted = {f.name: f.type for f in selected.arrow_schema()}
    follow = {} if fresh else _pending(entries) | columns_to_follow(stored, wanted, removed)
    follow = {c: how for c, how in follow.items() if c in stored and c in listed}
    # Back in describe() as the column holds it: backfilled now (a full copy reads every column anyway).
    returned = [] if fresh else sorted(c for c in marks if c in listed and c not in follow)
    to_classify = [c for c in gone if marks.get(c, {}).get("status") != REMOVED]
    status = _classify(salesforce, sobject.name, to_classify, kept) if to_classify else {}
    new_marks = {
        c: {
            "status": status.get(c, marks.get(c, {}).get("status", REMOVED)),
            "since": marks.get(c, {}).get("since") if c in marks and status.get(c) == marks[c].get("status") else None,
            "type": marks.get(c, {}).get("type") or types.get(c, "string"),
        }
        for c in gone
    }
    _date_and_announce(sobject.name, new_marks, marks, now)
    # Changes followed earlier stay recorded, unless the column is kept unfollowed now or followed again.
    earlier = {c: m for c, m in entries.items() if c not in marks and c not in new_marks and c not in follow}
    # The marks commit comes first (version + 1, the rewrites `PENDING`), the rewrite next (version + 2), then a
    # commit clearing `PENDING`: a run that ends before the last leaves the rewrite to the next run. A rewrite not
    # followed now (a full copy rewrites every column; a field gone again) is pending no more.
    followed = _followed_marks(follow, entries, stored, current, table.version() + 2, now)
    new_entries = new_marks | _done(earlier) | followed
    # Fields the org lists that the table has no column for (added, or made readable, since): a full copy writes
    # them anyway; any other run adds their columns and backfills them.
    added = [] if fresh else new_columns({f.name for f in table.schema().fields}, selected)
    if new_entries == entries and not returned and not added and not follow:
        return run, FieldAccess.of(marks)
    org_for_run(warehouse, table, salesforce, sobject.name)  # another org's replica: refused before any write
    if new_entries != entries or added or follow:
        keep_describe(table, current, {FIELD_ACCESS_PROPERTY: json.dumps(new_entries, sort_keys=True)})
        table = warehouse.table(sobject.name)
    schema, describe = resolve_schema(sobject, warehouse, salesforce, table=table)
    access = FieldAccess.of(new_marks)
    if follow:
        for c, how in sorted(follow.items()):
            log.warning(
                "%s.%s: %s in the org (now %s; the column held %s): the column is rewritten with the org's type and "
                "values",
                sobject.name,
                c,
                "its type changed" if how == RETYPED else "created again under its name",
                new_entries[c]["type"],
                stored[c],
            )
        assert table is not None, "the marks commit above loaded it"
        table, written = follow_columns(warehouse, salesforce, schema, table, sorted(follow), run_id=run_id, now=now)
        table.alter.set_table_properties(
            {FIELD_ACCESS_PROPERTY: json.dumps(_done(new_entries), sort_keys=True)}, raise_if_not_exists=False
        )
        table = warehouse.table(sobject.name)
        access.retyped = sorted(c for c, how in follow.items() if how == RETYPED)
        access.recreated = sorted(c for c, how in follow.items() if how == RECREATED)
        access.backfilled += written
    if returned or added:
        if added:
            log.info("%s: describe() lists fields the replica has no column for: %s", sobject.name, added)
        access.returned, access.added = returned, added
        access.backfilled += backfill_columns(
            warehouse, salesforce, schema, [*returned, *added], run_id=run_id, now=now
        )
        table = warehouse.table(sobject.name)
    return replace(run, schema=schema, describe=describe, table=table), access


def backfill_added(
    sobject: SObjectConfig,
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource | None,
    schema: ObjectSchema,
    before: set[str] | None,
    access: FieldAccess,
    *,
    run_id: str,
    now: datetime,
) -> FieldAccess:
    """After an apply that asked describe() again (events set a field the replica lacked) and added columns:
    backfill them from the org, for the records that got a value before the platform could read the field (no
    event of theirs carried it). `before`: the replica's columns as the run found it (None: no table then, so
    nothing to backfill); `schema`: the one applied with."""
    if before is None or sobject.describe_path or salesforce is None:
        return access
    added = new_columns(before, schema)
    if not added:
        return access
    written = backfill_columns(warehouse, salesforce, schema, added, run_id=run_id, now=now)
    return replace(access, added=[*access.added, *added], backfilled=access.backfilled + written)


def new_columns(have: set[str], schema: ObjectSchema) -> list[str]:
    """The columns of `schema` a table with the columns `have` lacks, less formula columns (their own refresh runs
    write them): what a backfill from the org fills."""
    return [c for c in schema.column_names if c not in have and c not in schema.formula_names]


def add_columns(warehouse: DeltaWarehouse, schema: ObjectSchema, columns: list[str]) -> DeltaTable:
    """Add those of `columns` the replica lacks, typed as `schema` types them (a metadata-only commit: no file is
    rewritten, every row reads null there); returns the table after it."""
    table = warehouse.reloaded(schema.name)
    have = {f.name for f in table.schema().fields}
    target = schema.arrow_schema()
    new = [target.field(c) for c in columns if c not in have]
    if new:
        table.alter.add_columns(Schema.from_arrow(pa.schema(new)).fields)
        table = warehouse.reloaded(schema.name)
    return table


def backfill_columns(
    warehouse: DeltaWarehouse,
    salesforce: SalesforceResource,
    schema: ObjectSchema,
    columns: list[str],
    *,
    run_id: str,
    now: datetime,
) -> int:
    """Write the org's values of `columns` into the rows the replica has (one Bulk API 2.0 queryAll of Id and
    them, one merge commit touching only those columns). A record the org has and the replica does not yet (its
    create event not applied: it may carry no value of a field the platform could not read then) is inserted
    dirty with those columns, so that the reconcile reads it whole and the events it skips lose nothing
    (`retype.INSERTED_DIRTY`).
    Returns the rows written."""
    table = add_columns(warehouse, schema, columns)
    rows = org_values(salesforce, schema, columns, now)
    if not rows.num_rows:
        return 0
    state = replace(ReplicaState.read(warehouse, table), run_id=run_id)
    _, written = warehouse.update_columns(
        schema.name,
        rows.sort_by("Id"),
        read=table,
        key_column="Id",
        columns=columns,
        partition_column=BUCKET_COLUMN,
        partition_values=rows[BUCKET_COLUMN].to_pylist(),
        key=state.KEY,
        state=state.to_dict(),
        txns={APPLY_APP: table.transaction_version(APPLY_APP) or 0},
        insert=rows.column_names,
    )
    log.info("%s: %s backfilled from the org: %d rows written", schema.name, columns, written)
    return written


def kept_fields(table: DeltaTable | None, schema: ObjectSchema) -> list[pa.Field]:
    """The table's columns kept for fields the org no longer serves (marked hidden or removed), as stored."""
    marks = marked_fields(table)
    if table is None or not marks:
        return []
    columns = set(schema.column_names)
    return [f for f in pa.schema(table.schema().to_arrow()) if f.name in marks and f.name not in columns]


def carry_kept(warehouse: DeltaWarehouse, replica: DeltaTable, rows: pa.Table, kept: list[pa.Field]) -> pa.Table:
    """Snapshot `rows` with the replica's values of the `kept` columns (null for a record it does not have): what
    the org no longer serves cannot come from the org, and a resync must not lose it."""
    buckets = sorted(set(rows[BUCKET_COLUMN].to_pylist()))
    old = warehouse.read_keys(
        replica, key_column="Id", keys=rows["Id"].to_pylist(), partitions=[(BUCKET_COLUMN, "in", buckets)]
    )
    at = pc.index_in(rows["Id"], value_set=old["Id"].cast(pa.string()).combine_chunks())
    for kept_field in kept:
        values = old[kept_field.name].take(at) if old.num_rows else pa.nulls(rows.num_rows, kept_field.type)
        rows = rows.append_column(kept_field, values.cast(kept_field.type))
    return rows
