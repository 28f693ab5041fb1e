"""Fold ordered change rows of one object into one net row per record (docs/design/contract.md §3, §5, §6).

The fold is what a loop over events would do, expressed as one Spark SQL query (window and aggregate expressions
over the changes of each record) so that Spark runs it in one pass per record:

- **Guard.** A change at or before the row's position is never applied. The position is commit order
  (docs/design/contract.md §4): `_sf_commit_ts`, then `_sf_commit_number` and `_sf_sequence_number`; replay ids are not
  compared, since they differ between channels (the same change delivered twice has two). Over a
  snapshot or reconcile row it is *superseded* (the fetched state already includes it); over a CDC row it is
  *late*: it arrived after its record moved past it, so the record becomes dirty.
- **Dirty.** A gap event, a late event, or an UPDATE/DELETE for a record never seen makes the record dirty; the
  changes after that point (and every change while already dirty) are *skipped*: they stay in change_events for
  reconciliation.
- **Stored and dirty.** Two kinds of change are applied *and* make their record dirty, so the reconcile fetches
  what they cannot say: the first UPDATE/DELETE of a record never seen (its given fields are all it knows), and a
  change carrying a person account's name record (`Name: {"LastName": ...}` in a person-account org, where
  `Account.Name` is a column and a compound parent at once: schema.py). Salesforce stores that account's `Name`
  formatted from the parts by a rule that depends on the org's locale (name order, which parts it shows) and
  never sends it in an event; the replica keeps the parts the event carries and fetches the formatted `Name` by
  id instead of imitating the rule. Such changes are counted (`names_to_fetch`) among the applied ones. Changes
  after either, in commit order, are skipped like those after a gap.
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
Each step is a named CTE, in data-flow order.

`fold_changes` returns the new full rows (only records that changed) plus per-record counters that the asset sums
into run metadata. `applied_changes` runs the same steps and stops at which change rows are applied (text diffs
are resolved from that before the fold; cdc_assets/diffs.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from object_schema.describe import ObjectSchema, spark_type
from spark_ops.sql import in_list, literal, quote, run_sql

SNAPSHOT = "SNAPSHOT"
RESETS = ("CREATE", "UNDELETE", SNAPSHOT)
LIFECYCLE = ("CREATE", "UNDELETE", "DELETE", SNAPSHOT)
# A SNAPSHOT row carries the record's deleted state in this field (Salesforce's own name; never a column).
SNAPSHOT_DELETED = "IsDeleted"
PARTIAL = ("UPDATE", "DELETE")
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
INSERTED = "inserted"


# Per change row: its position, and the guard of its record's current row (if any).
_GUARDED = """
guarded AS (
  SELECT ch.record_id, ch.change_type, ch.commit_ts, ch.commit_number, ch.sequence_number, ch.replay_id,
         ch.fields, ch.set_fields, ch.transaction_key,
         named_struct('commit_ts', ch.commit_ts, 'commit_number', ch.commit_number,
                      'sequence_number', ch.sequence_number, 'replay_id', coalesce(ch.replay_id, 0)) AS _pos,
         cur.Id IS NOT NULL AS _exists,
         cur._sf_dirty_since AS _cur_dirty,
         -- A snapshot or reconcile row has no commit number: anything committed at or before its
         -- SystemModstamp is in it.
         coalesce(cur.Id IS NOT NULL AND cur._sf_commit_ts IS NOT NULL AND (
             ch.commit_ts < cur._sf_commit_ts
             OR (ch.commit_ts = cur._sf_commit_ts AND (
                 cur._sf_commit_number IS NULL
                 OR named_struct('n', ch.commit_number, 's', ch.sequence_number)
                    <= named_struct('n', cur._sf_commit_number, 's', cur._sf_sequence_number)))), false) AS _stale,
         cur._sf_source AS _cur_source,
         startswith(ch.change_type, 'GAP_') AS _gap,
         {names} AS _names
  FROM {{changes}} ch LEFT JOIN cur ON ch.record_id = cur.Id
),
live AS (
  SELECT *, _stale AND (_cur_source != 'cdc' OR change_type = {snapshot}) AS superseded,
         NOT (_stale AND (_cur_source != 'cdc' OR change_type = {snapshot})) AS _live
  FROM guarded
),
firsts AS (
  SELECT *, _live AND _stale AND NOT _gap AS late,
         min(CASE WHEN _live THEN _pos END) OVER rec AS _first_pos,
         min_by(change_type, CASE WHEN _live THEN _pos END) OVER rec AS _first_type,
         min(CASE WHEN _live AND NOT _gap AND NOT _stale AND _names THEN _pos END) OVER rec AS _names_pos
  FROM live WINDOW rec AS (PARTITION BY record_id)
),
blocked AS (
  SELECT *, NOT _exists AND _first_type IN {partial} AS _unknown_partial,
         least(min(CASE WHEN _live AND (_gap OR late) THEN _pos END) OVER rec,
               CASE WHEN NOT _exists AND _first_type IN {partial}
                    THEN min(CASE WHEN _live AND _pos > _first_pos THEN _pos END) OVER rec END,
               min(CASE WHEN _live AND _pos > _names_pos THEN _pos END) OVER rec) AS _blocked_at
  FROM firsts WINDOW rec AS (PARTITION BY record_id)
),
classified AS (
  SELECT *, _live AND NOT _gap AND NOT late AND _cur_dirty IS NULL
            AND (_blocked_at IS NULL OR _pos < _blocked_at) AS applied
  FROM blocked
),
counted AS (
  SELECT *, _live AND _gap AS gaps,
         _live AND NOT _gap AND NOT late AND NOT applied AS dirty_skipped,
         applied AND _names AS {names_to_fetch},
         CASE WHEN (_live AND (_gap OR late)) OR (_unknown_partial AND _pos = _first_pos) OR (applied AND _names)
           THEN commit_ts END AS _dirty_from,
         max(CASE WHEN applied AND change_type IN {resets} THEN _pos END) OVER rec AS _reset_pos
  FROM classified WINDOW rec AS (PARTITION BY record_id)
),
effective AS (
  SELECT *, applied AND (_reset_pos IS NULL OR _pos >= _reset_pos) AS _effective FROM counted
),
folded AS (
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
         max_by(named_struct('deleted', change_type = 'DELETE' OR (change_type = {snapshot}
                               AND coalesce(element_at(fields, {snapshot_deleted}) = 'true', false)),
                             'commit_ts', commit_ts),
                CASE WHEN applied AND change_type IN {lifecycle} THEN _pos END) AS _life,
         max_by(named_struct('commit_ts', commit_ts, 'replay_id', replay_id, 'commit_number', commit_number,
                             'sequence_number', sequence_number, 'snapshot', change_type = {snapshot}),
                CASE WHEN applied THEN _pos END) AS _last,
         min(_dirty_from) AS _dirty_from,
         {counter_sums}
  FROM effective GROUP BY record_id
)"""

_SYSTEM = """
  coalesce(f._life.deleted, cur._sf_deleted, false) AS _sf_deleted,
  CAST(CASE WHEN f._life.deleted THEN f._life.commit_ts WHEN f._life IS NOT NULL THEN NULL
       ELSE cur._sf_deleted_at END AS timestamp) AS _sf_deleted_at,
  coalesce(f._last.commit_ts, cur._sf_commit_ts) AS _sf_commit_ts,
  -- a snapshot row has a commit time only (its SystemModstamp): what was committed at or before it is in it
  CAST(CASE WHEN f._last.snapshot THEN NULL WHEN f._last IS NOT NULL THEN f._last.replay_id
       ELSE cur._sf_replay_id END AS bigint) AS _sf_replay_id,
  CAST(CASE WHEN f._last.snapshot THEN NULL WHEN f._last IS NOT NULL THEN f._last.commit_number
       ELSE cur._sf_commit_number END AS bigint) AS _sf_commit_number,
  CAST(CASE WHEN f._last.snapshot THEN NULL WHEN f._last IS NOT NULL THEN f._last.sequence_number
       ELSE cur._sf_sequence_number END AS bigint) AS _sf_sequence_number,
  least(cur._sf_dirty_since, f._dirty_from) AS _sf_dirty_since,
  CASE WHEN f._last.snapshot THEN 'snapshot' WHEN f._last IS NOT NULL THEN 'cdc'
       ELSE coalesce(cur._sf_source, 'cdc') END AS _sf_source,
  substring(f.record_id, 1, {bucket_chars}) AS _sf_bucket,
  {counters},
  {changed} AS _changed,
  f._dirty_from IS NOT NULL AND cur._sf_dirty_since IS NULL AS newly_dirty,
  ({changed}) AND cur.Id IS NULL AS inserted"""

_CHANGED = (
    "(f.applied > 0 OR (f._dirty_from IS NOT NULL AND (cur._sf_dirty_since IS NULL "
    "OR f._dirty_from < cur._sf_dirty_since)))"
)


def fold_changes(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Net new rows for the records `changes` touch, given their `current` replica rows (possibly none).

    `changes`: canonical change rows of `schema`'s object (no overflow rows, closed transactions only).
    `current`: replica rows (full columns) of at least the touched ids.
    Returns one replica row per touched record, every column but `_sf_synced_at` (the caller stamps its run's
    time: cdc_assets/records.py `stamped`), one column per name in `SUMMED` (`COUNTERS` and `names_to_fetch`), and
    `_changed`: whether the row differs from `current` (only those need writing).
    """
    return run_sql(changes.sparkSession, fold_sql(schema, current.columns), changes=changes, current=current)


def _steps(schema: ObjectSchema, current_columns: list[str]) -> str:
    """The WITH clause: current rows aligned to the schema, then every step through `folded`."""
    guarded = _GUARDED.format(
        partial=in_list(PARTIAL),
        resets=in_list(RESETS),
        lifecycle=in_list(LIFECYCLE),
        snapshot=literal(SNAPSHOT),
        snapshot_deleted=literal(SNAPSHOT_DELETED),
        names=_carries_person_name(schema),
        names_to_fetch=NAMES_TO_FETCH,
        counter_sums=",\n         ".join(f"sum(CAST({n} AS bigint)) AS {n}" for n in SUMMED),
    )
    return f"WITH cur AS (SELECT {aligned_sql(schema, current_columns)} FROM {{current}}),{guarded}\n"


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
    """The fold as one query over `{changes}` and `{current}` (see `fold_changes`)."""
    data = [(c, t) for c, t in schema.columns if c != "Id"]
    # Each column's value looked up once, in a step of its own (a lookup both tested and read would scan twice).
    lookups = "".join(f", element_at(_values, {literal(c)}) AS _v{i}" for i, (c, _) in enumerate(data))
    values = ",\n  ".join(
        f"CASE WHEN f._v{i} IS NOT NULL THEN CAST(nullif(f._v{i}, '') AS {spark_type(t).simpleString()}) "
        f"WHEN f._has_reset THEN NULL ELSE cur.{quote(c)} END AS {quote(c)}"
        for i, (c, t) in enumerate(data)
    )
    system = _SYSTEM.format(
        bucket_chars=schema.bucket_chars, changed=_CHANGED, counters=", ".join(f"f.{n}" for n in SUMMED)
    )
    return (
        f"{_steps(schema, current_columns).rstrip()},\nlooked AS (SELECT *{lookups} FROM folded)\n"
        f"SELECT f.record_id AS Id,\n  {values},{system}\nFROM looked f LEFT JOIN cur ON f.record_id = cur.Id"
    )


def applied_changes(changes: DataFrame, current: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Which rows of `changes` the fold applies over `current` (its own steps, stopped before the values):
    `record_id, change_type, commit_micros, commit_number, sequence_number, replay_id, applied`. Resolving text
    diffs needs it: a diff applies to the value left by the applied changes before it (cdc_assets/unified_diff.py)."""
    query = (
        f"{_steps(schema, current.columns)}SELECT record_id, change_type, unix_micros(commit_ts) AS "
        f"commit_micros, commit_number, sequence_number, replay_id, applied FROM classified"
    )
    return run_sql(changes.sparkSession, query, changes=changes, current=current)


def aligned_sql(schema: ObjectSchema, have: list[str]) -> str:
    """Select list giving exactly the replica columns of `schema`, in order; columns not in `have` are null."""
    present = set(have)
    return ", ".join(
        f"CAST({quote(f.name) if f.name in present else 'NULL'} AS {f.dataType.simpleString()}) AS {quote(f.name)}"
        for f in schema.spark_schema().fields
    )
