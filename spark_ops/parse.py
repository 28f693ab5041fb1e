"""Landing-zone lines -> canonical change rows (design §4), with a quarantine reason for every bad line (§9).

Input is one row per landed line: `source_file, source_line, raw`. Parsing happens once, here:

- the CometD envelope (`{"channel", "data": {"payload", "event"}}`, or just the `data` object) is decoded with
  `from_json`; the payload body is read as `map<string,string>`, so every value keeps its JSON text and an explicit
  `null` stays distinguishable from an absent key;
- compound fields (`BillingAddress: {"City": ...}`) are flattened to their component columns (`BillingCity`)
  using describe() metadata, and `nulledFields` names (`BillingAddress.City`) are mapped the same way;
- every value of a replicated object is checked against its column type; a value that does not fit quarantines
  the whole line (applying part of an event would be silently wrong).

A line is either quarantined (`quarantine_reason` is set) or becomes one change row per record id. Everything is
built from Spark built-in functions: no Python UDF touches a row.
"""

from __future__ import annotations

from functools import reduce

import pyspark.sql.functions as F
from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T

from spark_ops.schema import ObjectSchema, spark_type
from spark_ops.sql import literal

CHANGE_TYPES = (
    "CREATE", "UPDATE", "DELETE", "UNDELETE",
    "GAP_CREATE", "GAP_UPDATE", "GAP_DELETE", "GAP_UNDELETE", "GAP_OVERFLOW",
)
HEADER = "ChangeEventHeader"
ID_PATTERN = r"^[A-Za-z0-9]{15}([A-Za-z0-9]{3})?$"
WILDCARD_PATTERN = r"^[A-Za-z0-9]{3,17}\*$"

_ENVELOPE = T.StructType([
    T.StructField("data", T.StructType([
        T.StructField("payload", T.StringType()),
        T.StructField("event", T.StructType([T.StructField("replayId", T.LongType())])),
    ])),
    T.StructField("payload", T.StringType()),
    T.StructField("event", T.StructType([T.StructField("replayId", T.LongType())])),
    T.StructField("_corrupt", T.StringType()),
])
_HEADER_FIELDS = T.StructType([
    T.StructField("entityName", T.StringType()),
    T.StructField("recordIds", T.ArrayType(T.StringType())),
    T.StructField("changeType", T.StringType()),
    T.StructField("changeOrigin", T.StringType()),
    T.StructField("transactionKey", T.StringType()),
    T.StructField("sequenceNumber", T.LongType()),
    T.StructField("commitTimestamp", T.LongType()),
    T.StructField("commitNumber", T.LongType()),
    T.StructField("commitUser", T.StringType()),
    T.StructField("nulledFields", T.ArrayType(T.StringType())),
    T.StructField("diffFields", T.ArrayType(T.StringType())),
    T.StructField("changedFields", T.ArrayType(T.StringType())),
])
_MAP = T.MapType(T.StringType(), T.StringType())

# Columns of a canonical change row, in the order change_events stores them.
CHANGE_COLUMNS = [
    "entity", "record_id", "change_type", "commit_ts", "commit_number", "transaction_key", "sequence_number",
    "replay_id", "event_key", "fields", "set_fields", "change_origin", "commit_user", "source_file", "source_line",
]


def decode_envelope(lines: DataFrame) -> DataFrame:
    """Decode the JSON envelope and header of each line; bad JSON leaves nulls for `quarantine_reasons`.

    Each text is parsed once: the line into the envelope, the payload into a map of raw JSON values, and only the
    header's own text into its struct (staged selects keep Spark from re-parsing a shared expression).
    """
    env = F.from_json("raw", _ENVELOPE, {"columnNameOfCorruptRecord": "_corrupt"})
    header = F.col("_header")
    return (
        lines.select("source_file", "source_line", "raw", env.alias("_env"))
        .select(
            "source_file", "source_line", "raw",
            F.col("_env._corrupt").isNull().alias("_is_object"),
            F.coalesce(F.col("_env.data.payload"), F.col("_env.payload")).alias("_payload"),
            F.coalesce(F.col("_env.data.event.replayId"), F.col("_env.event.replayId")).alias("replay_id"),
        )
        .withColumn("_body", F.from_json("_payload", _MAP))
        .withColumn("_header", F.from_json(F.element_at("_body", F.lit(HEADER)), _HEADER_FIELDS))
        .select(
            "source_file", "source_line", "raw", "_is_object", "_payload", "_body", "replay_id",
            header["entityName"].alias("entity"),
            header["recordIds"].alias("record_ids"),
            header["changeType"].alias("change_type"),
            header["changeOrigin"].alias("change_origin"),
            header["transactionKey"].alias("transaction_key"),
            header["sequenceNumber"].alias("sequence_number"),
            F.timestamp_millis(header["commitTimestamp"]).alias("commit_ts"),
            F.coalesce(header["commitNumber"], F.lit(0)).alias("commit_number"),
            header["commitUser"].alias("commit_user"),
            F.coalesce(header["nulledFields"], F.array().cast("array<string>")).alias("_nulled"),
            F.coalesce(header["diffFields"], F.array().cast("array<string>")).alias("diff_fields"),
        )
    )


def _not_in(names: list[str]):
    return lambda k, _v: ~k.isin(names)


def _renamer(rename: Column, parent: str):
    """Nested key -> component column; an unknown component keeps its dotted name (`BillingAddress.Foo`)."""
    return lambda k, _v: F.coalesce(F.element_at(rename, k), F.concat(F.lit(parent + "."), k))


def _flattened_body(schemas: dict[str, ObjectSchema]) -> Column:
    """The payload body with compound values replaced by their component columns, header removed."""
    body = F.map_filter("_body", lambda k, _v: k != HEADER)
    branches = None
    for entity, schema in schemas.items():
        if not schema.compound:
            continue
        flat = F.map_filter(body, _not_in(list(schema.compound)))
        parts = [flat]
        for parent, keys in schema.compound.items():
            rename = F.create_map(*[F.lit(x) for kv in keys.items() for x in kv])
            nested = F.from_json(F.element_at(body, F.lit(parent)), _MAP)
            renamed = F.transform_keys(nested, _renamer(rename, parent))
            parts.append(F.coalesce(renamed, F.create_map().cast(_MAP)))
        merged = reduce(F.map_concat, parts)
        branches = (F.when(F.col("entity") == entity, merged) if branches is None
                    else branches.when(F.col("entity") == entity, merged))
    return body if branches is None else branches.otherwise(body)


def _mapped_nulled(schemas: dict[str, ObjectSchema]) -> Column:
    """nulledFields with compound names (`BillingAddress.City`) mapped to columns (`BillingCity`)."""
    dotted = {k: v for s in schemas.values() for k, v in s.dotted_names.items()}
    if not dotted:
        return F.col("_nulled")
    rename = F.create_map(*[F.lit(x) for kv in dotted.items() for x in kv])
    return F.transform("_nulled", lambda x: F.coalesce(F.element_at(rename, x), x))


def flatten_fields(schemas: dict[str, ObjectSchema]):
    """`fields` (column -> JSON text, nulls kept) and `set_fields` (columns the event sets, nulls included)."""
    def apply(df: DataFrame) -> DataFrame:
        return (df.withColumn("fields", _flattened_body(schemas))
                  .withColumn("set_fields", F.array_sort(F.array_union(F.map_keys("fields"), _mapped_nulled(schemas)))))
    return apply


def _type_errors(schemas: dict[str, ObjectSchema]) -> Column:
    """First value of a replicated object that does not fit its column type, as a reason, else null.

    One SQL expression (see spark_ops.sql): objects can have hundreds of typed columns.
    """
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
        return F.lit(None).cast("string")
    return F.expr(f"element_at(array_compact(array({', '.join(checks)})), 1)")


def quarantine_reasons(schemas: dict[str, ObjectSchema]):
    """`quarantine_reason`: why a line cannot become change rows, or null when it can (design §9)."""
    def apply(df: DataFrame) -> DataFrame:
        ids_ok = F.forall("record_ids", lambda i: i.rlike(ID_PATTERN) | i.rlike(WILDCARD_PATTERN))
        reason = (
            F.when(~F.col("_is_object"), F.lit("not a JSON object"))
            .when(F.col("_payload").isNull(), F.lit("no data.payload object"))
            .when(F.col("_body").isNull(), F.lit("payload is not an object of fields"))
            .when(~F.map_contains_key("_body", HEADER), F.lit(f"payload has no {HEADER}"))
            .when(F.col("entity").isNull() | (F.col("entity") == ""), F.lit("header has no entityName"))
            .when(F.col("change_type").isNull(), F.lit("header has no changeType"))
            .when(~F.col("change_type").isin(*CHANGE_TYPES),
                  F.concat(F.lit("unknown changeType '"), F.substring("change_type", 1, 40), F.lit("'")))
            .when(F.col("transaction_key").isNull(), F.lit("header has no transactionKey"))
            .when(F.col("sequence_number").isNull(), F.lit("header sequenceNumber missing or not an integer"))
            .when(F.col("commit_ts").isNull(), F.lit("header commitTimestamp missing or not an integer"))
            .when(F.col("record_ids").isNull() | (F.size("record_ids") == 0), F.lit("header has no recordIds"))
            .when(~ids_ok, F.lit("header recordIds holds a value that is not a Salesforce id"))
            .otherwise(_type_errors(schemas))
        )
        return df.withColumn("quarantine_reason", reason)
    return apply


def parse_lines(lines: DataFrame, schemas: dict[str, ObjectSchema]) -> DataFrame:
    """Landed lines -> one row per line with its canonical fields and `quarantine_reason`."""
    return (lines.transform(decode_envelope)
                 .transform(flatten_fields(schemas))
                 .transform(quarantine_reasons(schemas)))


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
