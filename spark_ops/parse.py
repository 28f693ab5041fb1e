"""Landing-zone lines -> canonical change rows (design §4), with a quarantine reason for every bad line (§9).

Input is one row per landed line: `source_file, source_line, raw`. Parsing happens once, here:

- the CometD envelope (`{"channel", "data": {"payload", "event"}}`, or just the `data` object) is decoded with
  `from_json`; the payload body is read as `map<string,string>`, so every value keeps its JSON text and an explicit
  `null` stays distinguishable from an absent key;
- compound fields (`BillingAddress: {"City": ...}`) are flattened to their component columns (`BillingCity`)
  using describe() metadata, and `nulledFields` names (`BillingAddress.City`) are mapped the same way;
- `diffFields` names are kept (`diff_fields`, mapped likewise): their values are still the `{"diff": ...}` JSON
  text, resolved against the stored value at apply time (spark_ops/diffs.py);
- every value of a replicated object is checked against its column type; a value that does not fit quarantines
  the whole line (applying part of an event would be silently wrong).

A line is either quarantined (`quarantine_reason` is set) or becomes one change row per record id. Everything is
built from Spark built-in functions: no Python UDF touches a row.
"""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T

from spark_ops.schema import ObjectSchema, spark_type
from spark_ops.sql import in_list, literal, run_sql

CHANGE_TYPES = (
    "CREATE", "UPDATE", "DELETE", "UNDELETE",
    "GAP_CREATE", "GAP_UPDATE", "GAP_DELETE", "GAP_UNDELETE", "GAP_OVERFLOW",
)
HEADER = "ChangeEventHeader"
ID_PATTERN = r"^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$"
WILDCARD_PATTERN = r"^[A-Za-z0-9]{3,17}\*$"

_ENVELOPE = ("data STRUCT<payload: STRING, event: STRUCT<replayId: BIGINT>>, payload STRING, "
             "event STRUCT<replayId: BIGINT>, _corrupt STRING")
_HEADER_FIELDS = ("entityName STRING, recordIds ARRAY<STRING>, changeType STRING, changeOrigin STRING, "
                  "transactionKey STRING, sequenceNumber BIGINT, commitTimestamp BIGINT, commitNumber BIGINT, "
                  "commitUser STRING, nulledFields ARRAY<STRING>, diffFields ARRAY<STRING>, "
                  "changedFields ARRAY<STRING>")
_MAP = "map<string,string>"
_NO_STRINGS = "CAST(array() AS array<string>)"

# Columns of a canonical change row, in the order change_events stores them.
CHANGE_COLUMNS = [
    "entity", "record_id", "change_type", "commit_ts", "commit_number", "transaction_key", "sequence_number",
    "replay_id", "event_key", "fields", "set_fields", "diff_fields", "change_origin", "commit_user", "source_file",
    "source_line",
]

# Decode the JSON envelope and header of each line; bad JSON leaves nulls for the quarantine reason. Each text is
# parsed once: the line into the envelope, the payload into a map of raw JSON values, and only the header's own
# text into its struct (one CTE each, so Spark does not re-parse a shared expression).
_DECODE = f"""
envelope AS (
  SELECT source_file, source_line, raw,
         from_json(raw, {literal(_ENVELOPE)}, map('columnNameOfCorruptRecord', '_corrupt')) AS _env
  FROM {{lines}}
),
payload AS (
  SELECT source_file, source_line, raw, _env._corrupt IS NULL AS _is_object,
         coalesce(_env.data.payload, _env.payload) AS _payload,
         coalesce(_env.data.event.replayId, _env.event.replayId) AS replay_id
  FROM envelope
),
body AS (SELECT *, from_json(_payload, {literal(_MAP)}) AS _body FROM payload),
header AS (SELECT *, from_json(element_at(_body, {literal(HEADER)}), {literal(_HEADER_FIELDS)}) AS _header FROM body),
decoded AS (
  SELECT source_file, source_line, raw, _is_object, _payload, _body, replay_id,
         _header.entityName AS entity, _header.recordIds AS record_ids, _header.changeType AS change_type,
         _header.changeOrigin AS change_origin, _header.transactionKey AS transaction_key,
         _header.sequenceNumber AS sequence_number, timestamp_millis(_header.commitTimestamp) AS commit_ts,
         coalesce(_header.commitNumber, 0) AS commit_number, _header.commitUser AS commit_user,
         coalesce(_header.nulledFields, {_NO_STRINGS}) AS _nulled,
         coalesce(_header.diffFields, {_NO_STRINGS}) AS _diffs,
         map_filter(_body, (k, v) -> k != {literal(HEADER)}) AS _fields_raw
  FROM header
)"""


def _map_sql(pairs: dict[str, str]) -> str:
    return "map(" + ", ".join(f"{literal(k)}, {literal(v)}" for k, v in pairs.items()) + ")"


def _flattened_body(schemas: dict[str, ObjectSchema]) -> str:
    """The payload body (header removed) with compound values replaced by their component columns; a component
    not in describe() keeps its dotted name (`BillingAddress.Foo`)."""
    branches = []
    for entity, schema in schemas.items():
        if not schema.compound:
            continue
        parents = ", ".join(literal(p) for p in schema.compound)
        parts = [f"map_filter(_fields_raw, (k, v) -> NOT k IN ({parents}))"]
        for parent, keys in schema.compound.items():
            nested = f"from_json(element_at(_fields_raw, {literal(parent)}), {literal(_MAP)})"
            renamed = (f"transform_keys({nested}, (k, v) -> coalesce(element_at({_map_sql(keys)}, k), "
                       f"concat({literal(parent + '.')}, k)))")
            parts.append(f"coalesce({renamed}, CAST(map() AS {_MAP}))")
        branches.append(f"WHEN entity = {literal(entity)} THEN map_concat({', '.join(parts)})")
    return f"CASE {' '.join(branches)} ELSE _fields_raw END" if branches else "_fields_raw"


def _mapped_names(schemas: dict[str, ObjectSchema], names: str) -> str:
    """A header list of field names (nulledFields, diffFields) with compound names (`BillingAddress.City`) mapped
    to columns (`BillingCity`)."""
    dotted = {k: v for s in schemas.values() for k, v in s.dotted_names.items()}
    if not dotted:
        return names
    return f"transform({names}, x -> coalesce(element_at({_map_sql(dotted)}, x), x))"


def _type_errors(schemas: dict[str, ObjectSchema]) -> str:
    """First value of a replicated object that does not fit its column type, as a reason, else null."""
    checks = []
    for entity, schema in schemas.items():
        for column, sf_type in schema.columns:
            target = spark_type(sf_type)
            if isinstance(target, T.StringType):
                continue
            value = f"element_at(fields, {literal(column)})"
            prefix, suffix = literal(f"field {column} value '"), literal(f"' is not a valid {sf_type}")
            checks.append(
                f"CASE WHEN entity = {literal(entity)} AND {value} IS NOT NULL "
                f"AND try_cast({value} AS {target.simpleString()}) IS NULL "
                f"THEN concat({prefix}, substring({value}, 1, 80), {suffix}) END")
    if not checks:
        return "CAST(NULL AS string)"
    return f"element_at(array_compact(array({', '.join(checks)})), 1)"


def _quarantine_reason(schemas: dict[str, ObjectSchema]) -> str:
    """Why a line cannot become change rows, or null when it can (design §9)."""
    # `i IS NOT NULL` first: a null id makes RLIKE null, and forall() of a null is null, not false.
    ids_ok = (f"forall(record_ids, i -> i IS NOT NULL AND (i RLIKE {literal(ID_PATTERN)} "
              f"OR i RLIKE {literal(WILDCARD_PATTERN)}))")
    return f"""CASE
    WHEN NOT _is_object THEN 'not a JSON object'
    WHEN _payload IS NULL THEN 'no data.payload object'
    WHEN _body IS NULL THEN 'payload is not an object of fields'
    WHEN NOT map_contains_key(_body, {literal(HEADER)}) THEN {literal(f"payload has no {HEADER}")}
    WHEN entity IS NULL OR entity = '' THEN 'header has no entityName'
    WHEN change_type IS NULL THEN 'header has no changeType'
    WHEN NOT change_type IN {in_list(CHANGE_TYPES)}
      THEN concat({literal("unknown changeType '")}, substring(change_type, 1, 40), {literal("'")})
    WHEN transaction_key IS NULL THEN 'header has no transactionKey'
    WHEN sequence_number IS NULL THEN 'header sequenceNumber missing or not an integer'
    WHEN commit_ts IS NULL THEN 'header commitTimestamp missing or not an integer'
    WHEN record_ids IS NULL OR size(record_ids) = 0 THEN 'header has no recordIds'
    WHEN NOT {ids_ok} THEN 'header recordIds holds a value that is not a Salesforce id'
    ELSE {_type_errors(schemas)} END"""


def parse_sql(schemas: dict[str, ObjectSchema]) -> str:
    """`parse_lines` as one query over `{lines}`."""
    return f"""WITH {_DECODE},
flat AS (SELECT * EXCEPT (_fields_raw), {_flattened_body(schemas)} AS fields FROM decoded),
fielded AS (SELECT *, array_sort(array_union(map_keys(fields), {_mapped_names(schemas, "_nulled")})) AS set_fields,
                   {_mapped_names(schemas, "_diffs")} AS diff_fields FROM flat)
SELECT *, {_quarantine_reason(schemas)} AS quarantine_reason FROM fielded"""


def parse_lines(lines: DataFrame, schemas: dict[str, ObjectSchema]) -> DataFrame:
    """Landed lines (`source_file, source_line, raw`) -> one row per line with its canonical fields and
    `quarantine_reason`. One SQL query: parsed and analysed once, whatever the number and width of the objects."""
    return run_sql(lines.sparkSession, parse_sql(schemas), lines=lines)


def event_key(prefix: str = "") -> Column:
    """Event identity (design §4): entity, transaction key, sequence number and change type."""
    c = lambda n: F.col(prefix + n)  # noqa: E731
    return F.concat_ws("|", c("entity"), c("transaction_key"), c("sequence_number").cast("string"), c("change_type"))


def to_change_rows(parsed: DataFrame) -> DataFrame:
    """Good lines -> canonical change rows: one per record id the event names."""
    return (parsed.where(F.col("quarantine_reason").isNull())
                  .withColumn("record_id", F.explode(F.array_distinct("record_ids")))
                  .withColumn("event_key", event_key())
                  .select(*CHANGE_COLUMNS))


def quarantined(parsed: DataFrame) -> DataFrame:
    """Bad lines with their reason: `source_file, source_line, raw, reason`."""
    return (parsed.where(F.col("quarantine_reason").isNotNull())
                  .select("source_file", "source_line", "raw", F.col("quarantine_reason").alias("reason")))
