"""Landing-zone lines -> canonical change rows, with a quarantine reason for every bad line
(docs/design/contract.md §4, §9).

Input is one row per landed line: `source_file, source_line, raw`. Parsing happens once, here:

- the CometD envelope (`{"channel", "data": {"payload", "event"}}`, or just the `data` object) is decoded with
  `from_json`; the payload body is read as `map<string,string>`, so every value keeps its JSON text and an explicit
  `null` stays distinguishable from an absent key;
- compound fields (`BillingAddress: {"City": ...}`) are flattened to their component columns (`BillingCity`)
  using describe() metadata, and `nulledFields` names (`BillingAddress.City`) are mapped the same way. A compound
  parent that is also a column (a person-account org's `Account.Name`, a union) is read by what its value is:
  text is the column's value (a business account), an object its components (a person account). A person
  account's `Name` is never derived here: the org formats it from the parts by a locale-dependent rule and events
  never carry it, so the fold makes such a record dirty and the reconcile fetches it (spark_ops/fold.py);
- a long text sent as a diff is kept as its `{"diff": ...}` JSON text and named in `diff_fields` (mapped likewise),
  resolved against the stored value at apply time (replication/unified_diff.py). The Pub/Sub API names such fields in the
  header's `diffFields`; the Streaming API (CometD) sends no `diffFields` (nor `nulledFields`: a nulled field is an
  explicit null there), so a value is also a diff by its shape: an object with a `diff` member (`_DIFF_SHAPED`);
- every value of a replicated object is checked strictly against its describe() type (`true`/`false` for a
  boolean, `YYYY-MM-DD` for a date, an ISO-8601 instant with its zone for a datetime, ...: Spark's lenient casts
  would take `"yes"` as true or cut a datetime to a date). A value that does not fit quarantines the line with a
  reason (`value_error`), and its change rows become gap rows (`GAP_<type>`, no fields): applying part of an event
  would be silently wrong, dropping it would lose the change, so the record becomes dirty and is reconciled;
- an empty string means null (Salesforce stores no empty strings; the snapshot and reconcile paths read it so too).

Rows of an entity that is not replicated when its line is parsed keep the raw body (`typed` false); when the entity
becomes replicated, `normalize_changes` derives the same rows from them with its describe()
(docs/design/contract.md §4).

A line is quarantined with no rows (`quarantine_reason`: it cannot be read as an event), quarantined with gap rows
(`value_error`), or becomes one change row per record id. Everything is built from Spark built-in functions: no
Python UDF touches a row.
"""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import types as T

from object_schema.describe import ObjectSchema, spark_type
from shared.names import API_NAME_RULE, API_NAME_SQL, OVERFLOW_ID, RECORD_ID_SQL, WILDCARD_ID_SQL
from spark_ops.events import mark_duplicates
from spark_ops.fold import GAP_PREFIX
from spark_ops.protect import protected_map_sql, salt_frames, selected_names_sql
from spark_ops.sql import in_list, literal, run_sql
from spark_ops.validation import TIME_OF_DAY

CHANGE_TYPES = (
    "CREATE",
    "UPDATE",
    "DELETE",
    "UNDELETE",
    "GAP_CREATE",
    "GAP_UPDATE",
    "GAP_DELETE",
    "GAP_UNDELETE",
    "GAP_OVERFLOW",
)
HEADER = "ChangeEventHeader"

# Salesforce's dateTime range (1700-01-01T00:00:00Z to 4000-12-31T00:00:00Z, in epoch milliseconds): no commit time,
# SystemModstamp or read time an org or Datastream writes lies outside it. A writer that wrote microseconds or
# nanoseconds as milliseconds lands far beyond it, where Spark's conversion overflows (9.3e15 ms) or the instant
# exceeds what Python's datetime holds (1.7e15 ms, year 55,000): such a line is quarantined before converting.
EARLIEST_MS, LATEST_MS = -8_520_336_000_000, 64_060_502_400_000
EARLIEST_TIME = "1700-01-01T00:00:00Z"
TIME_RANGE = f"{EARLIEST_TIME}..4000-12-31T00:00:00Z"

# At most this many record ids in one event: Salesforce merges one change to several records of one transaction into
# one event, and a transaction changes at most 10,000 records (Apex's DML rows limit). An event naming more, or whose
# change rows (one per id, each with the whole field map) would exceed `MAX_EVENT_BYTES`, is taken as an overflow of
# its entity (one GAP_OVERFLOW row, a full resync, docs/design/contract.md §7) and quarantined with that reason:
# the change is not lost, and a writer cannot multiply one line into millions of rows.
MAX_RECORD_IDS = 10_000
MAX_EVENT_BYTES = 256 * 1024 * 1024
# At most this many bytes of change rows from one ingest batch, which the driver collects (`bound_batch`); at least
# `MAX_EVENT_BYTES`, so that an event within its own bound fits a batch of its own.
MAX_BATCH_CHANGE_BYTES = 1024 * 1024 * 1024
# What a change row holds besides its field map, at most: the ids, keys, header values and bookkeeping columns.
ROW_OVERHEAD_BYTES = 512

_ENVELOPE = (
    "data STRUCT<payload: STRING, event: STRUCT<replayId: BIGINT>>, payload STRING, "
    "event STRUCT<replayId: BIGINT>, _corrupt STRING"
)
_HEADER_FIELDS = (
    "entityName STRING, recordIds ARRAY<STRING>, changeType STRING, changeOrigin STRING, "
    "transactionKey STRING, sequenceNumber BIGINT, commitTimestamp BIGINT, commitNumber BIGINT, "
    "commitUser STRING, nulledFields ARRAY<STRING>, diffFields ARRAY<STRING>, "
    "changedFields ARRAY<STRING>"
)
_MAP = "map<string,string>"
_NO_STRINGS = "CAST(array() AS array<string>)"

# Columns of a parsed line, what `to_change_rows`, `quarantined` and `landed_rows` read; every landing format's
# parser gives them (spark_ops/datastream.py).
PARSED_COLUMNS = [
    "source_file",
    "source_line",
    "raw",
    "entity",
    "record_ids",
    "change_type",
    "commit_ts",
    "commit_number",
    "transaction_key",
    "sequence_number",
    "replay_id",
    "fields",
    "set_fields",
    "diff_fields",
    "change_origin",
    "commit_user",
    "typed",
    "quarantine_reason",
    "value_error",
]

# Columns of a canonical change row, in the order change_events stores them.
CHANGE_COLUMNS = [
    "entity",
    "record_id",
    "change_type",
    "commit_ts",
    "commit_number",
    "transaction_key",
    "sequence_number",
    "replay_id",
    "event_key",
    "fields",
    "set_fields",
    "diff_fields",
    "change_origin",
    "commit_user",
    "source_file",
    "source_line",
    "typed",
]


def millis_sql(millis: str) -> str:
    """SQL: the epoch milliseconds `millis` as a timestamp when they lie in Salesforce's dateTime range, else null
    (checked before converting: `timestamp_millis` overflows on values far beyond it)."""
    return f"CASE WHEN {millis} BETWEEN {EARLIEST_MS} AND {LATEST_MS} THEN timestamp_millis({millis}) END"


# A long text field sent as a diff is `"<Field>": {"diff": "<unified diff>"}` in a CometD event (Change Data Capture
# Developer Guide, "Data Differences in Event Fields"), which names it in no header field. The payload map holds an
# object's JSON text, re-serialized (`{"diff":"..."}`), exactly as it holds a text value with those characters:
# only the line itself tells them apart, so a value that opens like a diff object is looked up in the line (rare:
# only such values pay for it), where an object has a `diff` member and a string has none.
_DIFF_OPENING = '{"diff":'


def _diff_member(raw: str, prefix: str) -> str:
    return f"get_json_object({raw}, concat({literal(prefix)}, k, '.diff'))"


_DIFF_SHAPED = (
    f"coalesce(filter(map_keys(_body), k -> k != {literal(HEADER)} "
    f"AND startswith(element_at(_body, k), {literal(_DIFF_OPENING)}) "
    f"AND coalesce({_diff_member('raw', '$.data.payload.')}, {_diff_member('raw', '$.payload.')}) IS NOT NULL), "
    f"{_NO_STRINGS})"
)


# Decode the JSON envelope and header of each line; bad JSON leaves nulls for the quarantine reason. The line is
# parsed once into the envelope with the payload already a map of raw JSON values (Spark's JSON reader keeps each
# value's text, an object's re-serialized), and only the header's own text once more into its struct. A line whose
# envelope does not fit that shape (not an object, a payload that is not an object, a replayId that is not an
# integer) is decoded again the lenient way (payload as text, then as a map) to name exactly what is wrong: only bad
# lines pay for the second parse. One CTE a step, so Spark does not re-parse a shared expression.
_STRICT_ENVELOPE = (
    "data STRUCT<payload: MAP<STRING,STRING>, event: STRUCT<replayId: BIGINT>>, "
    "payload MAP<STRING,STRING>, event STRUCT<replayId: BIGINT>, _corrupt STRING"
)
_CORRUPT = "map('columnNameOfCorruptRecord', '_corrupt')"
_DECODE = f"""
envelope AS (
  SELECT source_file, source_line, raw, from_json(raw, {literal(_STRICT_ENVELOPE)}, {_CORRUPT}) AS _env
  FROM {{lines}}
),
lenient AS (
  SELECT *, CASE WHEN _env._corrupt IS NOT NULL THEN from_json(raw, {literal(_ENVELOPE)}, {_CORRUPT}) END AS _old
  FROM envelope
),
payload AS (
  SELECT source_file, source_line, raw,
         _env._corrupt IS NULL OR _old._corrupt IS NULL AS _is_object,
         CASE WHEN _env._corrupt IS NULL THEN coalesce(_env.data.payload, _env.payload) IS NOT NULL
              ELSE coalesce(_old.data.payload, _old.payload) IS NOT NULL END AS _has_payload,
         CASE WHEN _env._corrupt IS NULL THEN coalesce(_env.data.payload, _env.payload)
              ELSE from_json(coalesce(_old.data.payload, _old.payload), {literal(_MAP)}) END AS _body,
         CASE WHEN _env._corrupt IS NULL THEN coalesce(_env.data.event.replayId, _env.event.replayId)
              ELSE coalesce(_old.data.event.replayId, _old.event.replayId) END AS replay_id
  FROM lenient
),
header AS (SELECT *, from_json(element_at(_body, {literal(HEADER)}), {literal(_HEADER_FIELDS)}) AS _header
           FROM payload),
decoded AS (
  SELECT source_file, source_line, raw, _is_object, _has_payload, _body, replay_id,
         _header.entityName AS entity, _header.recordIds AS record_ids, _header.changeType AS change_type,
         _header.changeOrigin AS change_origin, _header.transactionKey AS transaction_key,
         _header.sequenceNumber AS sequence_number, _header.commitTimestamp AS _commit_ms,
         {millis_sql("_header.commitTimestamp")} AS commit_ts,
         coalesce(_header.commitNumber, 0) AS commit_number, _header.commitUser AS commit_user,
         coalesce(_header.nulledFields, {_NO_STRINGS}) AS _nulled,
         array_union(coalesce(_header.diffFields, {_NO_STRINGS}), {_DIFF_SHAPED}) AS _diffs,
         map_filter(_body, (k, v) -> k != {literal(HEADER)}) AS _fields_raw
  FROM header
)"""


def _map_sql(pairs: dict[str, str]) -> str:
    return "map(" + ", ".join(f"{literal(k)}, {literal(v)}" for k, v in pairs.items()) + ")"


def _per_entity(schemas: dict[str, ObjectSchema], branch, otherwise: str) -> str:
    """`CASE WHEN entity = <name> THEN branch(schema) ... ELSE otherwise END` over the schemas that need a branch."""
    branches = [f"WHEN entity = {literal(e)} THEN {sql}" for e, s in schemas.items() if (sql := branch(s))]
    return f"CASE {' '.join(branches)} ELSE {otherwise} END" if branches else otherwise


def flattened_sql(schemas: dict[str, ObjectSchema], body: str) -> str:
    """The map `body` with compound values replaced by their component columns; a component not in describe()
    keeps its dotted name (`BillingAddress.Foo`). Idempotent: a flattened map has no compound parents left."""

    def branch(schema: ObjectSchema) -> str | None:
        if not schema.compound:
            return None
        parts = [f"map_filter({body}, (k, v) -> {_kept_key(schema, 'k', 'v')})"]
        for parent, keys in schema.compound.items():
            nested = f"from_json(element_at({body}, {literal(parent)}), {literal(_MAP)})"
            renamed = (
                f"transform_keys({nested}, (k, v) -> coalesce(element_at({_map_sql(keys)}, k), "
                f"concat({literal(parent + '.')}, k)))"
            )
            parts.append(f"coalesce({renamed}, CAST(map() AS {_MAP}))")
        return f"map_concat({', '.join(parts)})"

    return _per_entity(schemas, branch, body)


def _is_object(value: str) -> str:
    return f"from_json({value}, {literal(_MAP)}) IS NOT NULL"


def _kept_key(schema: ObjectSchema, key: str, value: str) -> str:
    """SQL: payload key `key` stays a key of the flattened map: not a compound parent, or a parent that is a column
    (a union such as Account.Name) holding a plain value."""
    columns = set(schema.column_names)
    dropped = [p for p in schema.compound if p not in columns]
    unions = [p for p in schema.compound if p in columns]
    conditions = [f"NOT {key} IN ({', '.join(literal(p) for p in dropped)})"] if dropped else []
    if unions:
        conditions.append(f"NOT ({key} IN ({', '.join(literal(p) for p in unions)}) AND {_is_object(value)})")
    return " AND ".join(conditions) or "true"


def _mapped_names(schemas: dict[str, ObjectSchema], names: str) -> str:
    """A list of field names (nulledFields, diffFields, stored set_fields) as its entity's describe() names them:
    compound names (`BillingAddress.City`) mapped to columns (`BillingCity`), compound parents dropped. The one
    mapper of dotted names: per entity, as the entity's compound fields define them."""

    def branch(schema: ObjectSchema) -> str | None:
        if not schema.compound:
            return None
        parents = ", ".join(literal(p) for p in schema.compound if p not in set(schema.column_names)) or "''"
        return (
            f"transform(filter({names}, x -> NOT x IN ({parents})), "
            f"x -> coalesce(element_at({_map_sql(schema.dotted_names)}, x), x))"
        )

    return _per_entity(schemas, branch, names)


def _set_fields(schemas: dict[str, ObjectSchema], fields: str, names: str) -> str:
    """Names set by a change: the keys of its (flattened, protected) `fields` plus the field names in `names`
    (nulledFields, or stored set_fields), mapped by `_mapped_names`, less those `fields:` leaves out."""
    return f"array_sort(array_union(map_keys({fields}), {_selected_names(schemas, _mapped_names(schemas, names))}))"


def protected_sql(schemas: dict[str, ObjectSchema], fields: str) -> str:
    """The flattened map `fields` per entity without the fields replication.yaml's `fields:` leaves out and with
    its `hash:` fields hashed (spark_ops/protect.py): applied where change rows are built, before they are stored."""
    return _per_entity(schemas, lambda schema: protected_map_sql(schema, fields), fields)


def _selected_names(schemas: dict[str, ObjectSchema], names: str) -> str:
    """The field names `names` per entity, less those `fields:` leaves out."""
    return _per_entity(schemas, lambda schema: selected_names_sql(schema, names), names)


# What a value of each non-text column type must look like (as the JSON text of the value). Spark's own casts are
# lenient ('yes' and '1' are true, '2025-1-2' is a date, a datetime casts to its date), so the form is checked first.
_VALUE_FORMS: dict[type, str] = {
    T.BooleanType: r"\A(true|false)\z",
    T.LongType: r"\A-?[0-9]{1,19}\z",
    T.DoubleType: r"\A-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?\z",
    T.DateType: r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\z",
    T.TimestampType: (
        r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
        r"(Z|[+-][0-9]{2}:?[0-9]{2})\z"
    ),
}


# Text columns whose Salesforce type has one form: a time of day is `HH:MM:SS.sssZ`, as REST, Bulk and CometD
# events give it (the Pub/Sub subscriber turns the Avro milliseconds into the same text).
_TEXT_FORMS: dict[str, str] = {"time": TIME_OF_DAY}


def value_fits(value: str, target: T.DataType, sf_type: str | None = None) -> str:
    """SQL: the JSON text `value` (not null, not '') is a value of column type `target` (and of Salesforce type
    `sf_type`, for the text types with a form of their own)."""
    form = _VALUE_FORMS.get(type(target))
    if form is None:
        text_form = _TEXT_FORMS.get(sf_type or "")
        return f"({value} RLIKE {literal(text_form)})" if text_form else "true"
    return f"({value} RLIKE {literal(form)} AND try_cast({value} AS {target.simpleString()}) IS NOT NULL)"


def value_errors_sql(schemas: dict[str, ObjectSchema]) -> str:
    """First value (in describe() order) of a replicated object that does not fit its column type, as a reason,
    else null.

    Each entry of `fields` is checked once, against the form of its column's type (columns grouped by form): the
    cost follows the fields a change carries, not the object's width (a lookup per column was most of the parse).
    Only a change with a bad value pays for finding which of its bad values comes first in describe() order."""

    def branch(schema: ObjectSchema) -> str | None:
        checked = [(c, t) for c, t in schema.columns if type(spark_type(t)) in _VALUE_FORMS or t in _TEXT_FORMS]
        if not checked:
            return None
        groups: dict[str, list[str]] = {}
        for column, sf_type in checked:
            groups.setdefault(value_fits("v", spark_type(sf_type), sf_type), []).append(column)
        fits = " ".join(f"WHEN k IN {in_list(columns)} THEN {sql}" for sql, columns in groups.items())
        bad = f"map_filter(fields, (k, v) -> v IS NOT NULL AND v != '' AND NOT (CASE {fits} ELSE true END))"
        order = "map(" + ", ".join(f"{literal(c)}, {i}" for i, (c, _) in enumerate(checked, start=1)) + ")"
        names = "array(" + ", ".join(literal(c) for c, _ in checked) + ")"
        types = "array(" + ", ".join(literal(t) for _, t in checked) + ")"
        # Lambdas over one-element arrays name an intermediate value (the bad entries, the first one's position).
        reason = (
            f"concat('field ', element_at({names}, i), ' value \\'', "
            f"substring(element_at(b, element_at({names}, i)), 1, 80), '\\' is not a valid ', "
            f"element_at({types}, i))"
        )
        first = f"array_min(transform(map_keys(b), k -> element_at({order}, k)))"
        return (
            f"element_at(transform(array({bad}), b -> CASE WHEN cardinality(b) > 0 THEN "
            f"element_at(transform(array({first}), i -> {reason}), 1) END), 1)"
        )

    return _per_entity(schemas, branch, "CAST(NULL AS string)")


def not_a_name_sql(what: str, name: str) -> str:
    """SQL: the reason a line whose object name `name` (a column) is not an API name is quarantined. It quotes the
    name's first characters with anything but letters, digits and underscores shown as '?' (no control character
    of the landing zone reaches a log line through it)."""
    shown = f"regexp_replace(substring({name}, 1, 40), '[^A-Za-z0-9_]', '?')"
    opening, length = literal(what + " '"), literal("' (")
    rule = literal(" characters) is not a Salesforce object name: " + API_NAME_RULE)
    return f"concat({opening}, {shown}, {length}, char_length({name}), {rule})"


def _quarantine_reason() -> str:
    """Why a line cannot be read as an event at all, or null when it can (docs/design/contract.md §9)."""
    # `i IS NOT NULL` first: a null id makes RLIKE null, and forall() of a null is null, not false.
    ids_ok = (
        f"forall(record_ids, i -> i IS NOT NULL AND (i RLIKE {literal(RECORD_ID_SQL)} "
        f"OR i RLIKE {literal(WILDCARD_ID_SQL)}))"
    )
    return f"""CASE
    WHEN NOT _is_object THEN 'not a JSON object'
    WHEN NOT _has_payload THEN 'no data.payload object'
    WHEN _body IS NULL THEN 'payload is not an object of fields'
    WHEN NOT map_contains_key(_body, {literal(HEADER)}) THEN {literal(f"payload has no {HEADER}")}
    WHEN entity IS NULL OR entity = '' THEN 'header has no entityName'
    WHEN NOT entity RLIKE {literal(API_NAME_SQL)} THEN {not_a_name_sql("header entityName", "entity")}
    WHEN change_type IS NULL THEN 'header has no changeType'
    WHEN NOT change_type IN {in_list(CHANGE_TYPES)}
      THEN concat({literal("unknown changeType '")}, substring(change_type, 1, 40), {literal("'")})
    WHEN transaction_key IS NULL THEN 'header has no transactionKey'
    WHEN sequence_number IS NULL THEN 'header sequenceNumber missing or not an integer'
    WHEN commit_ts IS NULL AND _commit_ms IS NOT NULL
      THEN concat('header commitTimestamp ', _commit_ms, {
        literal(
            f" is not epoch milliseconds in Salesforce's dateTime range {TIME_RANGE} (microseconds or nanoseconds "
            f"written as milliseconds?)"
        )
    })
    WHEN commit_ts IS NULL THEN 'header commitTimestamp missing or not an integer'
    WHEN record_ids IS NULL OR size(record_ids) = 0 THEN 'header has no recordIds'
    WHEN NOT {ids_ok} THEN 'header recordIds holds a value that is not a Salesforce id'
    END"""


_IDS = "CAST(size(record_ids) AS BIGINT)"  # ids times bytes passes an int's range
_FIELD_BYTES = (
    "aggregate(map_entries(fields), 0L, (t, e) -> t + octet_length(e.key) + coalesce(octet_length(e.value), 0))"
)


def _oversized_sql() -> str:
    """SQL: why an event that reads as one names too many records to explode into change rows (`MAX_RECORD_IDS`,
    `MAX_EVENT_BYTES`), else null. The field map's size is summed only for a line whose ids times its length could
    pass the bound (Spark's `AND` evaluates its right side only when the left holds)."""
    n, field_bytes = _IDS, _FIELD_BYTES
    return f"""CASE WHEN {n} > {MAX_RECORD_IDS}
                   OR ({n} * octet_length(raw) > {MAX_EVENT_BYTES} AND {n} * {field_bytes} > {MAX_EVENT_BYTES})
      THEN concat('header recordIds names ', {n}, ' records with ', {field_bytes}, {
        literal(
            f" bytes of fields each (at most {MAX_RECORD_IDS} records, a Salesforce transaction's limit, and "
            f"{MAX_EVENT_BYTES} bytes of change rows per event): taken as an overflow, "
        )
    }, entity,
          ' is resynced in full') END"""


def parse_sql(schemas: dict[str, ObjectSchema]) -> str:
    """`parse_lines` as one query over `{lines}`."""
    typed = f"entity IN {in_list(list(schemas))}" if schemas else "false"
    return f"""WITH {_DECODE},
flat AS (SELECT * EXCEPT (_fields_raw), {flattened_sql(schemas, "_fields_raw")} AS _flat FROM decoded),
protected AS (SELECT * EXCEPT (_flat), {protected_sql(schemas, "_flat")} AS fields FROM flat),
fielded AS (SELECT *, {_set_fields(schemas, "fields", "_nulled")} AS set_fields, coalesce({typed}, false) AS typed,
                   {_selected_names(schemas, _mapped_names(schemas, "_diffs"))} AS diff_fields FROM protected),
reasoned AS (SELECT *, {_quarantine_reason()} AS quarantine_reason FROM fielded),
sized AS (SELECT *, CASE WHEN quarantine_reason IS NULL THEN {_oversized_sql()} END AS _oversized FROM reasoned),
checked AS (SELECT * EXCEPT (record_ids, change_type),
                   CASE WHEN _oversized IS NULL THEN record_ids ELSE array({literal(OVERFLOW_ID)}) END AS record_ids,
                   CASE WHEN _oversized IS NULL THEN change_type ELSE 'GAP_OVERFLOW' END AS change_type,
                   CASE WHEN quarantine_reason IS NULL THEN coalesce(_oversized, {value_errors_sql(schemas)}) END
                     AS value_error
            FROM sized)
SELECT {", ".join(PARSED_COLUMNS)} FROM checked"""


def parse_lines(lines: DataFrame, schemas: dict[str, ObjectSchema]) -> DataFrame:
    """Landed lines (`source_file, source_line, raw`) -> one row per line (`PARSED_COLUMNS`) with its canonical
    fields, `quarantine_reason` and `value_error`. One SQL query: parsed and analysed once, whatever the number
    and width of the objects."""
    return run_sql(lines.sparkSession, parse_sql(schemas), lines=lines, **salt_frames(lines.sparkSession, schemas))


def may_pass_batch_bound(text_bytes: int, lines: int, max_bytes: int) -> bool:
    """Whether lines of `text_bytes` in all may explode into more than `max_bytes` of change rows: a line names at
    most `MAX_RECORD_IDS` records, and each change row holds at most the line's fields (fewer bytes than its text)
    and `ROW_OVERHEAD_BYTES`. Below it (a landing run of a few events) `bound_batch` is not needed."""
    return MAX_RECORD_IDS * (text_bytes + lines * ROW_OVERHEAD_BYTES) > max_bytes


def bound_batch(parsed: DataFrame, max_bytes: int) -> DataFrame:
    """`parsed` (`PARSED_COLUMNS`) with every line past `max_bytes` of change rows in the batch's order (file, line)
    taken as an overflow of its entity, as an event over its own bound is (`_oversized_sql`): one GAP_OVERFLOW row,
    a quarantine entry saying why, a full resync. The driver collects a batch's change rows, and lines each within
    `MAX_EVENT_BYTES` could together exceed its memory however few bytes of text they are (10,000 ids and 25 KB of
    fields a line); the change is not lost, the values come from the org. A line's change rows are its ids times its
    field map and `ROW_OVERHEAD_BYTES`, summed in order over one partition (a sort of the batch's lines: asked only
    when `may_pass_batch_bound`)."""
    counted = F.col("quarantine_reason").isNull() & F.col("value_error").isNull()
    rows = F.when(counted, F.expr(f"{_IDS} * ({_FIELD_BYTES} + {ROW_OVERHEAD_BYTES})")).otherwise(F.lit(0))
    running = F.sum(rows).over(
        Window.orderBy("source_file", "source_line").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    past = counted & (running > max_bytes)
    reason = F.concat(
        F.lit(f"the batch's change rows pass {max_bytes} bytes at this line ("),
        F.size("record_ids").cast("string"),
        F.lit(" records): taken as an overflow, "),
        F.col("entity"),
        F.lit(" is resynced in full"),
    )
    overflow = {
        "record_ids": F.array(F.lit(OVERFLOW_ID)),
        "change_type": F.lit("GAP_OVERFLOW"),
        "value_error": F.col("_reason"),
    }
    return parsed.withColumn("_reason", F.when(past, reason)).select(
        *(
            F.when(F.col("_reason").isNotNull(), overflow[c]).otherwise(F.col(c)).alias(c) if c in overflow else c
            for c in PARSED_COLUMNS
        )
    )


def event_key(prefix: str = "") -> Column:
    """Event identity (docs/design/contract.md §4): entity, transaction key, sequence number and change type."""
    c = lambda n: F.col(prefix + n)  # noqa: E731
    return F.concat_ws("|", c("entity"), c("transaction_key"), c("sequence_number").cast("string"), c("change_type"))


# A change with a value that does not fit is not applied: it becomes a gap of its record (docs/design/contract.md §6).
_AS_GAP = f"""CASE WHEN value_error IS NULL OR startswith(change_type, {literal(GAP_PREFIX)}) THEN change_type
               ELSE concat({literal(GAP_PREFIX)}, change_type) END"""
_NO_FIELDS = f"CAST(map() AS {_MAP})"


def _gapped(frame: DataFrame) -> DataFrame:
    """Rows with a `value_error` as gap rows: `GAP_<type>`, no fields."""
    bad = F.col("value_error").isNotNull()
    return (
        frame.withColumn("change_type", F.expr(_AS_GAP))
        .withColumn("fields", F.when(bad, F.expr(_NO_FIELDS)).otherwise(F.col("fields")))
        .withColumn("set_fields", F.when(bad, F.expr(_NO_STRINGS)).otherwise(F.col("set_fields")))
    )


def to_change_rows(parsed: DataFrame) -> DataFrame:
    """Lines that read as events -> canonical change rows: one per record id the event names; a line with a value
    that does not fit gives gap rows (its identity stays the event's own)."""
    return (
        parsed.where(F.col("quarantine_reason").isNull())
        .withColumn("record_id", F.explode(F.array_distinct("record_ids")))
        .withColumn("event_key", event_key())
        .transform(_gapped)
        .select(*CHANGE_COLUMNS)
    )


_OUTPUT = "struct<record_id: string, quarantine: boolean>"
# Per parsed line: a change row per record id it names (unless it cannot be read as an event), and a quarantine
# entry if it is quarantined (a line with a value that does not fit has both: its gap rows and the entry).
_OUTPUTS = f"""concat(
  CASE WHEN quarantine_reason IS NULL
       THEN transform(array_distinct(record_ids), i -> named_struct('record_id', i, 'quarantine', false))
       ELSE CAST(array() AS array<{_OUTPUT}>) END,
  CASE WHEN quarantine_reason IS NOT NULL OR value_error IS NOT NULL
       THEN array(named_struct('record_id', CAST(NULL AS string), 'quarantine', true))
       ELSE CAST(array() AS array<{_OUTPUT}>) END)"""


def landed_rows(parsed: DataFrame) -> DataFrame:
    """Parsed lines -> their change rows and their quarantine entries in one pass (each line parsed once, nothing
    cached), told apart by `quarantine`:

    - false: a change row (`CHANGE_COLUMNS`, as `to_change_rows` makes it) with `is_duplicate`: the same event and
      record occur earlier in the batch (`mark_duplicates`);
    - true: a quarantine entry (`source_file, source_line, raw, reason, gapped`, as `quarantined` makes it)."""
    quarantine = F.col("quarantine")
    # The line's text is kept for its quarantine entry only: a change row does not carry it through the shuffle
    # that marks duplicates.
    return (
        parsed.select("*", F.inline(F.expr(_OUTPUTS)))
        .withColumn("raw", F.when(quarantine, F.col("raw")))
        .withColumn("event_key", F.when(~quarantine, event_key()))
        .transform(_gapped)
        .transform(mark_duplicates)
        .select(
            *CHANGE_COLUMNS,
            (~quarantine & F.col("is_duplicate")).alias("is_duplicate"),
            "quarantine",
            F.when(quarantine, F.col("raw")).alias("raw"),
            F.when(quarantine, F.coalesce("quarantine_reason", "value_error")).alias("reason"),
            F.when(quarantine, F.col("quarantine_reason").isNull()).alias("gapped"),
        )
    )


def quarantined(parsed: DataFrame) -> DataFrame:
    """Quarantined lines with their reason: `source_file, source_line, raw, reason`, and `gapped`: the line still
    gave gap rows (a value did not fit)."""
    return parsed.where(F.col("quarantine_reason").isNotNull() | F.col("value_error").isNotNull()).select(
        "source_file",
        "source_line",
        "raw",
        F.coalesce("quarantine_reason", "value_error").alias("reason"),
        F.col("quarantine_reason").isNull().alias("gapped"),
    )


def normalize_changes(changes: DataFrame, schema: ObjectSchema) -> DataFrame:
    """Stored change rows of `schema`'s object parsed while it was not replicated (`typed` not true) -> the rows
    parsing with its describe() would have made: compound values flattened, set names mapped, values checked
    (rows with a value that does not fit become gap rows, the reason in `value_error`). Other columns pass through.
    Idempotent: a row parsed with the same describe() comes out as it went in."""
    schemas = {schema.name: schema}
    checked = run_sql(
        changes.sparkSession,
        f"""
WITH flat AS (SELECT * EXCEPT (fields, set_fields), {flattened_sql(schemas, "fields")} AS _flat,
                     set_fields AS _names FROM {{changes}}),
protected AS (SELECT * EXCEPT (_flat), CASE WHEN coalesce(typed, false) THEN _flat
                                            ELSE {protected_sql(schemas, "_flat")} END AS fields FROM flat),
fielded AS (SELECT * EXCEPT (_names), {_set_fields(schemas, "fields", "_names")} AS set_fields FROM protected)
SELECT * EXCEPT (typed), true AS typed, {value_errors_sql(schemas)} AS value_error FROM fielded""",
        changes=changes,
        **salt_frames(changes.sparkSession, schemas),
    )
    return checked.transform(_gapped).select(*changes.columns, "value_error")
