"""Google Datastream's Salesforce events -> the same canonical change rows as CometD lines
(docs/design/contract.md §2, §4).

A landing zone may also receive the JSON files Datastream writes for a Salesforce source. Each line is one event:

    {"stream_name": "...", "read_method": "salesforce-cdc" | "salesforce-backfill", "object": "Account",
     "schema_key": "...", "uuid": "...", "read_timestamp": "...", "source_timestamp": "...",
     "sort_keys": [...], "source_metadata": {"object_name": "Account", "change_type": "INSERT" | "UPDATE" |
     "DELETE", "is_deleted": false}, "payload": {"Id": "001...", "Name": "...", "BillingCity": ..., ...}}

**Format, per file.** `parse_landed` sorts files, not lines: a file is Datastream when one of its lines is a JSON
object with top-level `uuid` and `read_method` (only lines holding both words are parsed for that, so a
CometD-only landing pays one substring scan); all its lines then go through `parse_datastream`, every other
file through `spark_ops.parse.parse_lines`. A writer writes one format per file; a CometD line in a Datastream
file is quarantined (it has no `uuid`), never guessed at.

**What an event is.** Datastream's Salesforce source polls the org (REST and Bulk 2.0 API, by SystemModstamp)
and every event carries the entire row: it is the record's *state* at `source_timestamp` (its SystemModstamp),
not a change. So every Datastream event, cdc or backfill, becomes one `SNAPSHOT` change row, folded with the
semantics the platform already has for resync and reconcile rows (spark_ops/fold.py):

- the image resets the row: a replicated field absent from the payload is null (a full row, unlike a CometD
  UPDATE's changed fields); `IsDeleted` (from `source_metadata.is_deleted`, `change_type` DELETE, or the
  payload's own `IsDeleted`) says whether the record is deleted: a delete keeps the values the image carries,
  an image of a live record after a delete is an undelete;
- an image older than the replica row (a backfill read before newer changes were applied) is *superseded*,
  never applied and never a reason to reconcile; once applied, the row is a snapshot row (no commit number),
  so a CDC change committed at or before its SystemModstamp that lands later is superseded too. Backfill and cdc
  images therefore need no different handling: `read_method` is kept as the row's `change_origin`;
- an image applies to a record the replica never saw (it is whole), so a backfill is an initial load.

**Order and transactions.** Datastream has no transaction key, commit number, sequence number or replay id. The
canonical order (§4: commit_ts, commit_number, sequence_number) gets: `commit_ts` = `source_timestamp` (the
first of Datastream's `sort_keys`, which start with it; used when source_timestamp is absent); `commit_number` =
the largest long, because the image holds every change committed at its instant, so it sorts after the CometD
events of that instant (a snapshot row's guard reads it the same way); `sequence_number` = `read_timestamp` in
epoch ms: of two images of one record at one instant, the later read sorts last (they hold the same state, as a
record's state changes only with its SystemModstamp). The other sort keys have no documented meaning for
Salesforce and are not used. Each event is its own transaction (`transaction_key` = `datastream:<uuid>`), so
transaction closing (replication/closure.py) treats it like a one-event CometD transaction.

**Dedup by uuid.** The event identity (§4) is built from the transaction key, so it carries the uuid: the same
event in two files, or a file landed twice, is a duplicate of change_events' existing dedup key and is counted,
not applied twice. A backfill run again by Datastream has new uuids: its images are not duplicates but, being no
newer than the row, are superseded.

**Values.** Payload values keep their JSON text and go through the same strict describe() checks as CometD values
(spark_ops/parse.py `value_errors_sql`): a datetime is an ISO-8601 instant, a date `YYYY-MM-DD`, a boolean
`true`/`false`. One difference: a payload datetime without a zone is UTC (`utc_datetimes_sql`), since Datastream's
own datetime type carries no zone (its `source_timestamp` is read the same way); the CometD path stays strict. A value that does not fit quarantines the line with its reason and the row becomes a gap
(`GAP_SNAPSHOT`): the record is dirty and reconciled, never half-applied. Compound fields arrive flattened
(`BillingCity`); a nested compound value is flattened as on the CometD path. `SystemModstamp` is not a column
(the row's `_sf_commit_ts` is it); formula fields are not replicated by Datastream.

**Bad lines** (not JSON, no uuid, no object, an object name that is not an API name, an unknown read_method or
change_type, no payload object, no or a malformed `Id`, no usable timestamp) are quarantined with the reason and
the run goes on. An object that is not replicated is stored untyped and counted `ignored`, as on the CometD path.
"""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import DataFrame

from object_schema.describe import ObjectSchema
from shared.names import API_NAME_SQL, RECORD_ID_SQL
from spark_ops.fold import SNAPSHOT, SNAPSHOT_DELETED
from spark_ops.parse import (
    EARLIEST_MS,
    LATEST_MS,
    PARSED_COLUMNS,
    TIME_RANGE,
    flattened_sql,
    millis_sql,
    not_a_name_sql,
    parse_lines,
    protected_sql,
    value_errors_sql,
)
from spark_ops.protect import salt_frames
from spark_ops.sql import in_list, literal, run_sql

LAST_IN_INSTANT = 9_223_372_036_854_775_807  # commit_number of an image: after every change of its instant
KEY_PREFIX = "datastream:"
READ_METHODS = ("cdc", "backfill")
CHANGE_TYPES = ("INSERT", "UPDATE", "DELETE")

_MAP = "map<string,string>"
_ISO_ZONED = r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:?[0-9]{2})\z"
_ISO_LOCAL = r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?\z"
_EPOCH_MS = r"\A-?[0-9]{1,18}\z"  # a long (the range check keeps timestamp_millis from overflowing)
_CDC_METHOD, _BACKFILL_METHOD = r"(\A|-)cdc\z", r"(\A|-)backfill\z"  # `salesforce-cdc`, `cdc`, ...


def _instant(text: str) -> str:
    """SQL: a Datastream timestamp (epoch ms, or ISO-8601, UTC when it has no zone) as a timestamp, else null; null
    too outside Salesforce's dateTime range (spark_ops/parse.py `EARLIEST_MS`): a time no org writes, and one a
    Python datetime may not hold."""
    iso = f"""CASE WHEN {text} RLIKE {literal(_ISO_ZONED)} THEN try_cast({text} AS timestamp)
                   WHEN {text} RLIKE {literal(_ISO_LOCAL)} THEN try_cast(concat({text}, 'Z') AS timestamp) END"""
    in_range = f"t -> unix_millis(t) BETWEEN {EARLIEST_MS} AND {LATEST_MS}"
    return f"""CASE WHEN {text} RLIKE {literal(_EPOCH_MS)} THEN {millis_sql(f"CAST({text} AS bigint)")}
         ELSE try_element_at(filter(array({iso}), {in_range}), 1) END"""


def utc_datetimes_sql(schemas: dict[str, ObjectSchema], body: str) -> str:
    """The map `body` with each datetime field of its entity that has no zone read as UTC (`Z` appended): Datastream
    writes Salesforce datetimes in its own datetime type, which carries no zone (a space before the time becomes `T`).
    Other values are left as they are,
    for the strict checks (`value_errors_sql`)."""
    branches = []
    for entity, schema in schemas.items():
        datetimes = [c for c, sf_type in schema.columns if sf_type == "datetime"]
        if datetimes:
            branches.append(
                f"WHEN entity = {literal(entity)} THEN transform_values({body}, (k, v) -> CASE WHEN k IN "
                f"{in_list(datetimes)} AND v RLIKE {literal(_ISO_LOCAL)} THEN concat(substring(v, 1, 10), 'T', substring(v, 12), 'Z') ELSE v END)"
            )
    return f"CASE {' '.join(branches)} ELSE {body} END" if branches else body


def _datastream_sql(schemas: dict[str, ObjectSchema]) -> str:
    typed = f"entity IN {in_list(list(schemas))}" if schemas else "false"
    dropped = in_list(["Id", SNAPSHOT_DELETED, "SystemModstamp", "attributes"])  # attributes: REST-style type info
    return f"""WITH top AS (
  SELECT source_file, source_line, raw, from_json(raw, {literal(_MAP)}) AS _top FROM {{lines}}
),
parts AS (
  SELECT *, from_json(element_at(_top, 'source_metadata'), {literal(_MAP)}) AS _meta,
         from_json(element_at(_top, 'payload'), {literal(_MAP)}) AS _payload,
         from_json(element_at(_top, 'sort_keys'), 'array<string>') AS _sort_keys,
         lower(element_at(_top, 'read_method')) AS _read_method, element_at(_top, 'uuid') AS _uuid
  FROM top
),
decoded AS (
  SELECT *, coalesce(nullif(element_at(_meta, 'object_name'), ''), element_at(_top, 'object')) AS entity,
         upper(element_at(_meta, 'change_type')) AS _change,
         CASE WHEN _read_method RLIKE {literal(_CDC_METHOD)} THEN 'cdc'
              WHEN _read_method RLIKE {literal(_BACKFILL_METHOD)}
              THEN 'backfill' END AS _method,
         element_at(_payload, 'Id') AS _id,
         coalesce({_instant("element_at(_top, 'source_timestamp')")},
                  {_instant("element_at(_sort_keys, 1)")},
                  {_instant("element_at(_payload, 'SystemModstamp')")}) AS commit_ts,
         coalesce(unix_millis({_instant("element_at(_top, 'read_timestamp')")}), 0) AS sequence_number
  FROM parts
),
fielded AS (
  SELECT *, coalesce(lower(element_at(_meta, 'is_deleted')) = 'true', false) OR _change = 'DELETE'
              OR coalesce(lower(element_at(_payload, {literal(SNAPSHOT_DELETED)})) = 'true', false) AS _deleted,
         map_filter(_payload, (k, v) -> NOT k IN {dropped}) AS _fields_raw
  FROM decoded
),
canonical AS (
  SELECT source_file, source_line, raw, entity, array(_id) AS record_ids, {literal(SNAPSHOT)} AS change_type,
         commit_ts, CAST({LAST_IN_INSTANT} AS bigint) AS commit_number,
         concat({literal(KEY_PREFIX)}, _uuid) AS transaction_key, sequence_number, CAST(NULL AS bigint) AS replay_id,
         map_concat({protected_sql(schemas, utc_datetimes_sql(schemas, flattened_sql(schemas, "_fields_raw")))},
                    map({literal(SNAPSHOT_DELETED)}, CASE WHEN _deleted THEN 'true' ELSE 'false' END)) AS fields,
         CAST(array() AS array<string>) AS diff_fields, _read_method AS change_origin,
         CAST(NULL AS string) AS commit_user, coalesce({typed}, false) AS typed,
         CASE
           WHEN _top IS NULL THEN 'not a JSON object'
           WHEN _uuid IS NULL OR _uuid = '' THEN 'Datastream event has no uuid'
           WHEN entity IS NULL OR entity = '' THEN 'Datastream event names no object'
           WHEN NOT entity RLIKE {literal(API_NAME_SQL)} THEN {not_a_name_sql("Datastream object", "entity")}
           WHEN _method IS NULL
             THEN concat('unknown Datastream read_method ''', substring(coalesce(_read_method, ''), 1, 40), '''')
           WHEN _change IS NOT NULL AND NOT _change IN {in_list(CHANGE_TYPES)}
             THEN concat('unknown Datastream change_type ''', substring(_change, 1, 40), '''')
           WHEN _payload IS NULL THEN 'Datastream payload is not an object of fields'
           WHEN _id IS NULL THEN 'Datastream payload has no Id'
           WHEN NOT _id RLIKE {literal(RECORD_ID_SQL)} THEN 'Datastream payload Id is not a Salesforce id'
           WHEN commit_ts IS NULL THEN {
        literal(
            "Datastream event has no source_timestamp (or first sort key, or payload SystemModstamp) that is a time "
            f"in Salesforce's dateTime range {TIME_RANGE} (epoch milliseconds or ISO-8601)"
        )
    }
         END AS quarantine_reason
  FROM fielded
),
keyed AS (SELECT *, array_sort(map_keys(fields)) AS set_fields FROM canonical)
SELECT *, CASE WHEN quarantine_reason IS NULL THEN {value_errors_sql(schemas)} END AS value_error FROM keyed"""


def parse_datastream(lines: DataFrame, schemas: dict[str, ObjectSchema]) -> DataFrame:
    """Datastream lines (`source_file, source_line, raw`) -> one parsed row per line (`PARSED_COLUMNS`): a
    `SNAPSHOT` change of the record in the payload, or a `quarantine_reason`."""
    return run_sql(
        lines.sparkSession, _datastream_sql(schemas), lines=lines, **salt_frames(lines.sparkSession, schemas)
    ).select(*PARSED_COLUMNS)


def datastream_files(lines: DataFrame) -> list[str]:
    """Files holding a Datastream event: a line that is a JSON object with top-level `uuid` and `read_method`."""
    candidates = lines.where(F.col("raw").contains('"uuid"') & F.col("raw").contains('"read_method"'))
    top = F.from_json("raw", "uuid string, read_method string")
    hits = candidates.where(top.uuid.isNotNull() & top.read_method.isNotNull()).select("source_file").distinct()
    return sorted(r.source_file for r in hits.collect())


def parse_landed(lines: DataFrame, schemas: dict[str, ObjectSchema]) -> DataFrame:
    """Landed lines of any supported format -> parsed rows for `to_change_rows` and `quarantined`: Datastream
    files through `parse_datastream`, the others through the CometD parser (unchanged when there are none)."""
    files = datastream_files(lines)
    if not files:
        return parse_lines(lines, schemas)
    in_datastream = F.col("source_file").isin(files)
    cometd = parse_lines(lines.where(~in_datastream), schemas)
    return cometd.unionByName(parse_datastream(lines.where(in_datastream), schemas))
