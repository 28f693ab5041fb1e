"""Fold ordered change rows of one object into one net row per record (docs/design/contract.md §3, §5, §6).

The fold is what a loop over events would do, expressed as one Spark SQL query (window and aggregate expressions
over the changes of each record) so that Spark runs it in one pass per record:

- **Guard.** A change at or before the row's position is never applied. The position is commit order
  (docs/design/contract.md §4, declared in spark_ops/order.py): `_sf_commit_ts`, then `_sf_commit_number` and
  `_sf_sequence_number`; replay ids are not compared, since they differ between channels (the same change
  delivered twice has two). Over a snapshot or reconcile row it is *superseded* (the fetched state already
  includes it); over a CDC row it is *late*: it arrived after its record moved past it, so the record becomes
  dirty.
- **Dirty.** A gap event (`GAP_<type>`: `GAP_PREFIX` below says which modules make them), a late event, or an
  UPDATE/DELETE for a record never seen makes the record dirty (steps `blocked` and `counted`); the changes after
  that point (and every change while already dirty) are *skipped*: they stay in change_events for reconciliation.
- **Stored and dirty.** Two kinds of change are applied *and* make their record dirty, so the reconcile fetches what
  they cannot say: the first UPDATE/DELETE of a record never seen (its given fields are all it knows), and a change
  carrying a person account's name record (`Name: {"LastName": ...}` in a person-account org, where `Account.Name` is a
  column and a compound parent at once: object_schema/describe.py). Salesforce stores that account's `Name` formatted
  from the parts by a rule that depends on the org's locale (name order, which parts it shows) and never sends it in an
  event; the replica keeps the parts the event carries and fetches the formatted `Name` by id instead of imitating the
  rule. Such changes are counted (`names_to_fetch`) among the applied ones. Changes after either, in commit order, are
  skipped like those after a gap.
- **Snapshot rows.** A `SNAPSHOT` change (spark_ops/datastream.py) is the record's whole state at its commit
  time, as a resync or reconcile fetch would read it, with `IsDeleted` among its fields. It is folded with the
  same rules as those rows: stale, it is *superseded* (never late: an older image of a record holds nothing
  newer); applied, it resets the row to its image (deleted or not), and if it is the last change applied the
  row becomes a snapshot row (`_sf_source = 'snapshot'`, no commit or sequence number), so a CDC change at or
  before its commit time that arrives later is superseded too. It applies to records never seen (it is whole).
- **Values.** A CREATE/UNDELETE/SNAPSHOT resets the row (fields it does not carry become null); each column then
  takes the value of the last applied change that set it, explicit nulls included, or keeps the stored value. An
  empty string is null, as on the snapshot and reconcile paths (Salesforce stores no empty strings). DELETE and
  UNDELETE flip `_sf_deleted`; field values survive a DELETE.

Why one SQL text: built through the Column API, the fold cost thousands of Python-to-JVM calls per object and
run (seconds of fixed cost per replica, growing with the object's width); as SQL it is parsed and analysed once.
Each step is a named CTE written by a function of its own whose docstring says what the step adds, composed in
data-flow order: `guard_steps` (`cur`, `guarded`, `live`, `firsts`, `blocked`, `classified`, `counted`: where a
change is superseded, late, a gap, skipped or applied, and where its record becomes dirty), then the fold's
`effective` and `folded`, then the values and the system columns (`system_columns_sql`, which the history versions
use too).

`fold_changes` returns the new full rows (only records that changed) plus per-record counters that the asset sums
into run metadata. `with_applied` runs the same steps and stops at which change rows are applied (text diffs are
resolved from that before the fold; replication/diffs.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from object_schema.describe import ObjectSchema, spark_type
from spark_ops.order import COMMIT_ORDER, at_or_before_row_sql, position_sql
from spark_ops.sql import in_list, literal, quote, run_sql

SNAPSHOT = "SNAPSHOT"
RESETS = ("CREATE", "UNDELETE", SNAPSHOT)
LIFECYCLE = ("CREATE", "UNDELETE", "DELETE", SNAPSHOT)
# A SNAPSHOT row carries the record's deleted state in this field (Salesforce's own name; never a column).
SNAPSHOT_DELETED = "IsDeleted"
PARTIAL = ("UPDATE", "DELETE")
# A change the platform cannot apply as it came (a value that does not fit, spark_ops/parse.py; a text diff that does
# not apply, replication/unified_diff.py; fields lost in the landing or a column added later, replication/history/
# backfill.py and replication/describe_drift.py) travels as `GAP_<type>`: the fold makes its record dirty at its commit
# (steps `blocked` and `counted`), which the reconcile then fetches from the org (docs/design/contract.md §6).
GAP_PREFIX = "GAP_"
COUNTERS = ("applied", "gaps", "late", "superseded", "dirty_skipped")
# Applied changes that carry a person account's name parts: their record is dirty until the reconcile fetches the
# Name the org formats from them (a subset of `applied`, not a term of the events_read identity).
NAMES_TO_FETCH = "names_to_fetch"
SUMMED = (*COUNTERS, NAMES_TO_FETCH)
CHANGE_TYPES_WITH_FIELDS = ("CREATE", "UPDATE", "UNDELETE")
CHANGED = "_changed"
# The columns of a change row the fold (and the history's versions, spark_ops/history.py) read: only these need to
# reach Spark.
FOLD_INPUT = (
    "record_id",
    "change_type",
    "commit_ts",
    "commit_number",
    "sequence_number",
    "replay_id",
    "fields",
    "set_fields",
    "transaction_key",
)
NEWLY_DIRTY = "newly_dirty"
APPLIED = "applied"
INSERTED = "inserted"


def gap_type(change_type: str) -> str:
    """The change type a change of `change_type` travels as when it cannot be applied (`GAP_PREFIX`)."""
    return change_type if change_type.startswith(GAP_PREFIX) else GAP_PREFIX + change_type


def current_sql(schema: ObjectSchema, current_columns: list[str]) -> str:
    """Step `cur`: the current replica rows of `{current}`, with exactly `schema`'s columns (one the table lacks
    reads null), so every later step can name any column."""
    return f"cur AS (SELECT {aligned_sql(schema, current_columns)} FROM {{current}})"


def guarded_sql(schema: ObjectSchema) -> str:
    """Step `guarded`: each change row beside its record's current row. Adds the change's commit-order position
    `_pos` (spark_ops/order.py), whether the record exists (`_exists`), since when it is dirty (`_cur_dirty`) and
    where its row came from (`_cur_source`); `_stale`, the guard (§5): the change is at or before the position the
    row keeps, so it must never be applied; `_gap`, a gap event; `_names`, the change carries a person account's
    name parts."""
    return f"""guarded AS (
  SELECT {", ".join(f"ch.{c}" for c in FOLD_INPUT)},
         {position_sql("ch")} AS _pos,
         cur.Id IS NOT NULL AS _exists,
         cur._sf_dirty_since AS _cur_dirty,
         {at_or_before_row_sql("ch", "cur")} AS _stale,
         cur._sf_source AS _cur_source,
         startswith(ch.change_type, {literal(GAP_PREFIX)}) AS _gap,
         {_carries_person_name(schema)} AS _names
  FROM {{changes}} ch LEFT JOIN cur ON ch.record_id = cur.Id
)"""


def live_sql() -> str:
    """Step `live`: `superseded`, a stale change over a fetched row (snapshot, reconcile, poll: it holds every
    change at or before its SystemModstamp) or a stale SNAPSHOT change (an older image holds nothing newer); it
    is counted and nothing more. Every other change is `_live`: it ends applied, a gap, late or skipped."""
    superseded = f"_stale AND (_cur_source != 'cdc' OR change_type = {literal(SNAPSHOT)})"
    return f"""live AS (
  SELECT *, {superseded} AS superseded, NOT ({superseded}) AS _live
  FROM guarded
)"""


def firsts_sql() -> str:
    """Step `firsts`: `late`, a live stale change (over a CDC row: it arrived after its record moved past it);
    per record, the position and type of its first live change (`_first_pos`, `_first_type`) and the position of
    its first clean change carrying name parts (`_names_pos`)."""
    return """firsts AS (
  SELECT *, _live AND _stale AND NOT _gap AS late,
         min(CASE WHEN _live THEN _pos END) OVER rec AS _first_pos,
         min_by(change_type, CASE WHEN _live THEN _pos END) OVER rec AS _first_type,
         min(CASE WHEN _live AND NOT _gap AND NOT _stale AND _names THEN _pos END) OVER rec AS _names_pos
  FROM live WINDOW rec AS (PARTITION BY record_id)
)"""


def blocked_sql() -> str:
    """Step `blocked`: where each record's changes stop being applied (`_blocked_at`, null: never), the first of:
    a gap or late change; the change after the first change of a record never seen when that is an UPDATE or
    DELETE (`_unknown_partial`: its given fields are all the replica knows); the change after one carrying name
    parts. Those changes themselves make the record dirty (step `counted`)."""
    unknown_partial = f"NOT _exists AND _first_type IN {in_list(PARTIAL)}"
    return f"""blocked AS (
  SELECT *, {unknown_partial} AS _unknown_partial,
         least(min(CASE WHEN _live AND (_gap OR late) THEN _pos END) OVER rec,
               CASE WHEN {unknown_partial}
                    THEN min(CASE WHEN _live AND _pos > _first_pos THEN _pos END) OVER rec END,
               min(CASE WHEN _live AND _pos > _names_pos THEN _pos END) OVER rec) AS _blocked_at
  FROM firsts WINDOW rec AS (PARTITION BY record_id)
)"""


def classified_sql() -> str:
    """Step `classified`: `applied`, a live change that is no gap, not late, of a record not already dirty, and
    before the record is blocked. What is not applied stays in change_events."""
    return """classified AS (
  SELECT *, _live AND NOT _gap AND NOT late AND _cur_dirty IS NULL
            AND (_blocked_at IS NULL OR _pos < _blocked_at) AS applied
  FROM blocked
)"""


def counted_sql() -> str:
    """Step `counted`: the per-change counters (`gaps`, `dirty_skipped`, `names_to_fetch`; `applied`, `late` and
    `superseded` are set before), `_dirty_from`, the commit time a change makes its record dirty at (a gap, a late
    change, an unknown record's first UPDATE/DELETE, an applied change with name parts: §6), and per record
    `_reset_pos`, the position of its last applied CREATE / UNDELETE / SNAPSHOT (which reset the row)."""
    return f"""counted AS (
  SELECT *, _live AND _gap AS gaps,
         _live AND NOT _gap AND NOT late AND NOT applied AS dirty_skipped,
         applied AND _names AS {NAMES_TO_FETCH},
         CASE WHEN (_live AND (_gap OR late)) OR (_unknown_partial AND _pos = _first_pos) OR (applied AND _names)
           THEN commit_ts END AS _dirty_from,
         max(CASE WHEN applied AND change_type IN {in_list(RESETS)} THEN _pos END) OVER rec AS _reset_pos
  FROM classified WINDOW rec AS (PARTITION BY record_id)
)"""


def guard_steps(schema: ObjectSchema, current_columns: list[str]) -> str:
    """The WITH clause every query over `{changes}` and `{current}` starts with: the steps from `cur` through
    `counted`, in data-flow order; each change row is then classified (`applied`, `superseded`, `late`, `gaps`,
    `dirty_skipped`) and knows where its record becomes dirty. The fold (`fold_sql`), the applied changes
    (`with_applied`) and the history versions (spark_ops/history.py) all read them: one set of rules."""
    steps = [
        current_sql(schema, current_columns),
        guarded_sql(schema),
        live_sql(),
        firsts_sql(),
        blocked_sql(),
        classified_sql(),
        counted_sql(),
    ]
    return "WITH " + ",\n".join(steps)


def effective_sql() -> str:
    """Step `effective`: `_effective`, an applied change at or after its record's last reset: the changes whose
    values the row ends with (those before a reset are overwritten by it)."""
    return """effective AS (
  SELECT *, applied AND (_reset_pos IS NULL OR _pos >= _reset_pos) AS _effective FROM counted
)"""


def folded_sql() -> str:
    """Step `folded`: one row per record. `_values`, column -> the text its last effective change set it to (an
    explicit null as `''`); `_has_reset`; `_life`, what the last applied lifecycle change left (`lifecycle_sql`);
    `_last`, the position the last applied change left (`kept_position_sql`); `_dirty_from`, the earliest dirty
    mark; and the counter sums."""
    sums = ",\n         ".join(f"sum(CAST({n} AS bigint)) AS {n}" for n in SUMMED)
    return f"""folded AS (
  SELECT record_id,
         -- column -> JSON text of the last effective change that set it, an explicit null as '' (which reads as
         -- null, as everywhere): entries in commit order, the last one of a key wins
         -- (spark.sql.mapKeyDedupPolicy=LAST_WIN). One narrow aggregate whatever the object's width. No value is
         -- null, so one lookup per column (a scan of the map) says both whether a change set it and to what.
         -- (a field nulled by nulledFields alone is in set_fields, not in fields: entries without a lookup per name)
         map_from_entries(flatten(transform(array_sort(collect_list(CASE WHEN _effective THEN struct(
             _pos, concat(transform(map_entries(fields), e -> struct(e.key AS key, coalesce(e.value, '') AS value)),
                          transform(array_except(set_fields, map_keys(fields)), c -> struct(c AS key, '' AS value)))
             AS entries) END)),
           x -> x.entries))) AS _values,
         max(_reset_pos IS NOT NULL) AS _has_reset,
         max_by({lifecycle_sql()}, CASE WHEN applied AND change_type IN {in_list(LIFECYCLE)} THEN _pos END) AS _life,
         max_by({kept_position_sql()}, CASE WHEN applied THEN _pos END) AS _last,
         min(_dirty_from) AS _dirty_from,
         {sums}
  FROM effective GROUP BY record_id
)"""


def lifecycle_sql(alias: str = "") -> str:
    """SQL: what the change row `alias` does to its record's deleted state, `struct(deleted, commit_ts)`: a DELETE
    deletes, a SNAPSHOT image deletes when its `IsDeleted` is true, every other lifecycle change undeletes."""
    a = f"{alias}." if alias else ""
    deleted = (
        f"{a}change_type = 'DELETE' OR ({a}change_type = {literal(SNAPSHOT)} "
        f"AND coalesce(element_at({a}fields, {literal(SNAPSHOT_DELETED)}) = 'true', false))"
    )
    return f"named_struct('deleted', {deleted}, 'commit_ts', {a}commit_ts)"


def kept_position_sql(alias: str = "") -> str:
    """SQL: what the change row `alias`, applied last, leaves in its row's position columns:
    `struct(commit_ts, replay_id, commit_number, sequence_number, snapshot)`."""
    a = f"{alias}." if alias else ""
    return (
        f"named_struct('commit_ts', {a}commit_ts, 'replay_id', {a}replay_id, 'commit_number', {a}commit_number, "
        f"'sequence_number', {a}sequence_number, 'snapshot', {a}change_type = {literal(SNAPSHOT)})"
    )


def system_columns_sql(*, record: str, life: str, last: str, dirty: str, bucket_chars: int) -> str:
    """SQL: the system columns of a replica row (docs/design/contract.md §8, in table order through `_sf_bucket`;
    `_sf_synced_at` is stamped by the caller) after its applied changes, over its current row `cur`.

    `record`: the record id; `life`: what its last applied lifecycle change left (`lifecycle_sql`; null: none,
    the deleted state is kept); `last`: what its last applied change left (`kept_position_sql`; null: none, the
    position is kept); `dirty`: since when it is dirty. A snapshot row keeps a commit time only (its
    SystemModstamp, `_sf_source = 'snapshot'`): what was committed at or before it is in it."""
    kept = "CASE WHEN {last}.snapshot THEN NULL WHEN {last} IS NOT NULL THEN {last}.{c} ELSE cur._sf_{c} END"
    positions = "".join(
        f"\n  CAST({kept.format(last=last, c=c)} AS bigint) AS _sf_{c},"
        for c in ("replay_id", "commit_number", "sequence_number")
    )
    return f"""
  coalesce({life}.deleted, cur._sf_deleted, false) AS _sf_deleted,
  CAST(CASE WHEN {life}.deleted THEN {life}.commit_ts WHEN {life} IS NOT NULL THEN NULL
       ELSE cur._sf_deleted_at END AS timestamp) AS _sf_deleted_at,
  coalesce({last}.commit_ts, cur._sf_commit_ts) AS _sf_commit_ts,{positions}
  {dirty} AS _sf_dirty_since,
  CASE WHEN {last}.snapshot THEN 'snapshot' WHEN {last} IS NOT NULL THEN 'cdc'
       ELSE coalesce(cur._sf_source, 'cdc') END AS _sf_source,
  substring({record}, 1, {bucket_chars}) AS _sf_bucket"""


# The row differs from its current one: a change was applied, or the record became dirty earlier than it was.
_CHANGED = (
    "(f.applied > 0 OR (f._dirty_from IS NOT NULL AND (cur._sf_dirty_since IS NULL "
    "OR f._dirty_from < cur._sf_dirty_since)))"
)


def fold_changes(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Net new rows for the records `changes` touch, given their `current` replica rows (possibly none).

    `changes`: canonical change rows of `schema`'s object (no overflow rows, closed transactions only).
    `current`: replica rows (full columns) of at least the touched ids.
    Returns one replica row per touched record, every column but `_sf_synced_at` (the caller stamps its run's
    time: replication/records.py `stamped`), one column per name in `SUMMED` (`COUNTERS` and `names_to_fetch`), and
    `_changed`: whether the row differs from `current` (only those need writing).
    """
    return run_sql(changes.sparkSession, fold_sql(schema, current.columns), changes=changes, current=current)


def _carries_person_name(schema: ObjectSchema) -> str:
    """SQL: the change row (`ch`) carries a person account's name parts, so the org's formatted Name must be
    fetched. A SNAPSHOT image carries the Name itself."""
    parts = schema.person_name_parts
    if not parts:
        return "false"
    return (
        f"(ch.change_type IN {in_list(CHANGE_TYPES_WITH_FIELDS)} "
        f"AND exists(ch.set_fields, c -> c IN ({', '.join(literal(p) for p in parts)})))"
    )


def fold_sql(schema: ObjectSchema, current_columns: list[str]) -> str:
    """The fold as one query over `{changes}` and `{current}` (see `fold_changes`): the guard steps, `effective`,
    `folded`, then one value per column and the system columns."""
    data = [(c, t) for c, t in schema.columns if c != "Id"]
    # Each column's value looked up once, in a step of its own (a lookup both tested and read would scan twice).
    lookups = "".join(f", element_at(_values, {literal(c)}) AS _v{i}" for i, (c, _) in enumerate(data))
    values = ",\n  ".join(
        f"CASE WHEN f._v{i} IS NOT NULL THEN CAST(nullif(f._v{i}, '') AS {spark_type(t).simpleString()}) "
        f"WHEN f._has_reset THEN NULL ELSE cur.{quote(c)} END AS {quote(c)}"
        for i, (c, t) in enumerate(data)
    )
    system = system_columns_sql(
        record="f.record_id",
        life="f._life",
        last="f._last",
        dirty="least(cur._sf_dirty_since, f._dirty_from)",
        bucket_chars=schema.bucket_chars,
    )
    counters = ", ".join(f"f.{n}" for n in SUMMED)
    return (
        f"{guard_steps(schema, current_columns)},\n{effective_sql()},\n{folded_sql()},\n"
        f"looked AS (SELECT *{lookups} FROM folded)\n"
        f"SELECT f.record_id AS Id,\n  {values},{system},\n  {counters},\n  {_CHANGED} AS {CHANGED},\n"
        f"  f._dirty_from IS NOT NULL AND cur._sf_dirty_since IS NULL AS {NEWLY_DIRTY},\n"
        f"  ({_CHANGED}) AND cur.Id IS NULL AS {INSERTED}\n"
        f"FROM looked f LEFT JOIN cur ON f.record_id = cur.Id"
    )


def with_applied(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Every row of `changes`, with all its columns, and `applied`: whether the fold applies it over `current` (its
    own steps, stopped before the values). Resolving text diffs needs it: a diff applies to the value left by the
    applied changes before it (replication/unified_diff.py). A row is matched to its classification by its record,
    type and commit-order position (null-safe), as the same change delivered twice is one change."""
    keys = ("record_id", "change_type", *(k.column for k in COMMIT_ORDER))
    query = (
        f"{guard_steps(schema, current.columns)},\n"
        f"applied_keys AS (SELECT DISTINCT {', '.join(keys)} FROM classified WHERE applied)\n"
        f"SELECT ch.*, a.record_id IS NOT NULL AS {APPLIED}\n"
        f"FROM {{changes}} ch LEFT JOIN applied_keys a ON {' AND '.join(f'ch.{k} <=> a.{k}' for k in keys)}"
    )
    return run_sql(changes.sparkSession, query, changes=changes, current=current)


def aligned_sql(schema: ObjectSchema, have: list[str]) -> str:
    """Select list giving exactly the replica columns of `schema`, in order; columns not in `have` are null."""
    present = set(have)
    return ", ".join(
        f"CAST({quote(f.name) if f.name in present else 'NULL'} AS {f.dataType.simpleString()}) AS {quote(f.name)}"
        for f in schema.spark_schema().fields
    )
