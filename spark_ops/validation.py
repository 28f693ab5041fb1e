"""A pandera schema for replica rows, built from the same `ObjectSchema` that builds the table
(docs/design/contract.md §8).

What it enforces is what every replica row promises whatever wrote it (CDC fold, snapshot, reconcile):
- each describe() column has its replica type, and the system columns theirs;
- `Id` is never null, nor are the system columns every writer sets (`_sf_deleted`, `_sf_source`,
  `_sf_synced_at`, the layout column);
- `_sf_source` says which path wrote the row: `cdc`, `snapshot`, `reconcile` or `poll`;
- a `time` column holds times of day as Salesforce's APIs return them, `HH:MM:SS.sssZ`
  (docs/design/contract.md §8: time → string).

What it leaves out on purpose: describe()'s `nillable`. A CDC replica legitimately holds partial rows (an UPDATE
for a record it has never seen, a dirty placeholder awaiting reconciliation), so a required Salesforce field may be
null here. Columns the table gained later (schema evolution) are allowed: the schema is not strict.

Pure: a schema in, a pandera schema out; `schema_errors` validates a DataFrame it is handed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from object_schema.describe import BUCKET_COLUMN, SYSTEM_COLUMNS, ObjectSchema, spark_type

if TYPE_CHECKING:
    from pandera.pyspark import Check, DataFrameSchema

SOURCES = ("cdc", "snapshot", "reconcile", "poll")
NOT_NULL = frozenset({"Id", "_sf_deleted", "_sf_source", "_sf_synced_at", BUCKET_COLUMN})


# Read by Python's regex (pandera compiles it) and by Java's (Spark runs it, here and in the parse): `(?![\s\S])` is
# the absolute end in both, where `$` also matches before a final line break.
TIME_OF_DAY = r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z(?![\s\S])"


def _value_checks(sf_type: str) -> list[Check]:
    from pandera.pyspark import Check

    return [Check.str_matches(TIME_OF_DAY)] if sf_type == "time" else []


def replica_schema(schema: ObjectSchema) -> DataFrameSchema:
    """The pandera (pyspark) schema every row of `schema`'s replica table satisfies."""
    # pandera imported here, not with the module: it brings pandas and pyspark.pandas (~0.3 s, seconds under load),
    # which a run worker would otherwise import before its first step instead of at its first schema check.
    from pandera.pyspark import Check, Column, DataFrameSchema

    columns = {
        # pandera's annotation lists pyspark's concrete types, not their base DataType (which it accepts).
        name: Column(spark_type(sf_type), checks=_value_checks(sf_type), nullable=name not in NOT_NULL)  # type: ignore[arg-type]
        for name, sf_type in schema.columns
    }
    for name, dtype in SYSTEM_COLUMNS:
        checks = [Check.isin(list(SOURCES))] if name == "_sf_source" else []
        columns[name] = Column(dtype, checks=checks, nullable=name not in NOT_NULL)  # type: ignore[arg-type]  # as above
    return DataFrameSchema(columns, name=f"replica_{schema.name}", strict=False, coerce=False)


def schema_errors(df: DataFrame, schema: DataFrameSchema) -> list[dict]:
    """Every way `df` violates `schema`, one dict per failure: `column`, `check`, `error` (the reason code), `message`.

    Data-level checks always run (pandera's pyspark default can be lowered by `PANDERA_VALIDATION_DEPTH`).
    """
    from pandera.config import ValidationDepth, config_context

    with config_context(validation_depth=ValidationDepth.SCHEMA_AND_DATA):
        validated = schema.validate(df, lazy=True)
    errors: dict[str, dict[str, list[dict[str, Any]]]] = validated.pandera.errors or {}
    return [
        {"column": e.get("column"), "check": e.get("check"), "error": reason, "message": e.get("error")}
        for by_reason in errors.values()
        for reason, items in by_reason.items()
        for e in items
    ]
