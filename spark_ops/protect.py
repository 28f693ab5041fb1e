"""Column hashing in Spark: the hash of object_schema/hashing.py as Spark SQL, and field selection on change rows.

The same function in its three forms, which tests/spark_ops/test_protect.py checks agree value for value:
- `hash_text` (Python, hashlib, object_schema/hashing.py): the definition;
- `hashed_sql` (Spark SQL `sha2(concat(salt, v), 256)`): the CDC and Datastream paths, where change rows are built
  (spark_ops/parse.py, spark_ops/datastream.py), before anything is stored in change_events. The salt is data
  there, never SQL text: a one-row DataFrame (`salt_frames`) the query reads in a scalar subquery. Spark shows a
  query's text and its plans, literals included, in logs, `explain`, the UI and error messages; it does not print
  the rows of a local relation. (A bound parameter or `F.lit` becomes a literal of the analyzed plan.) Spark runs
  no subquery inside a lambda, so hashed values are computed field by field, outside `transform_values`;
- `hash_arrow` (Arrow arrays, object_schema/hashing.py): resync, reconcile and poll rows (replication/records.py
  `replica_rows`).

Which fields are hashed or left out is `ObjectSchema.hashed` / `.selects` (object_schema/describe.py).
`protected_map_sql` is the change-row form: the fields map of one object without the fields `fields` leaves out,
hashed where `hash` says.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from object_schema.describe import ObjectSchema
from object_schema.hashing import hash_salt
from spark_ops.sql import literal

# The frame a query that hashes reads the salt from: `run_sql` binds `{hash_salt}` to `salt_frames`' DataFrame.
SALT_FRAME = "hash_salt"
_NO_ENTRIES = "CAST(map() AS map<string,string>)"


def salt_frame(spark: SparkSession, salt: str | None = None) -> DataFrame:
    """`salt` (default `hash_salt()`) as a one-row DataFrame of one column, `salt`: what `hashed_sql` reads."""
    return spark.createDataFrame(pa.table({"salt": pa.array([salt or hash_salt()], pa.string())}))


def salt_frames(spark: SparkSession, schemas: dict[str, ObjectSchema]) -> dict[str, DataFrame]:
    """The frames `run_sql` binds for a query built with `protected_map_sql` over `schemas`: the salt's
    (`SALT_FRAME`) when an object hashes, else none (and no salt needed)."""
    return {SALT_FRAME: salt_frame(spark)} if any(s.hashed for s in schemas.values()) else {}


def hashed_sql(value: str) -> str:
    """`hash_text` as a Spark SQL expression over the string expression `value`, salted from the query's
    `{hash_salt}` frame (`salt_frames`). Not inside a lambda (`transform_values`, `filter`): Spark refuses a
    subquery there."""
    return (
        f"CASE WHEN {value} IS NULL OR {value} = '' THEN NULL "
        f"ELSE sha2(concat((SELECT salt FROM {{{SALT_FRAME}}}), {value}), 256) END"
    )


def protected_map_sql(schema: ObjectSchema, body: str) -> str | None:
    """The fields map `body` (flattened: keys are field names) of `schema`'s object without the fields `fields`
    leaves out and with `hash` fields hashed; None when the object has neither. A query using it binds
    `salt_frames`."""
    sql = body
    if schema.include is not None:
        sql = f"map_filter({sql}, (k, v) -> k IN ({', '.join(literal(n) for n in sorted(schema.include))}))"
    if schema.exclude:
        sql = f"map_filter({sql}, (k, v) -> NOT k IN ({', '.join(literal(n) for n in sorted(schema.exclude))}))"
    if schema.hashed:
        names = [literal(n) for n in sorted(schema.hashed)]
        hashed = [
            f"CASE WHEN map_contains_key({sql}, {n}) THEN map({n}, {hashed_sql(f'element_at({sql}, {n})')}) "
            f"ELSE {_NO_ENTRIES} END"
            for n in names
        ]
        sql = f"map_concat(map_filter({sql}, (k, v) -> NOT k IN ({', '.join(names)})), {', '.join(hashed)})"
    return None if sql == body else sql


def selected_names_sql(schema: ObjectSchema, names: str) -> str | None:
    """The array of field names `names` without those `fields` leaves out; None when nothing is left out."""
    parts = []
    if schema.include is not None:
        parts.append(f"x IN ({', '.join(literal(n) for n in sorted(schema.include))})")
    if schema.exclude:
        parts.append(f"NOT x IN ({', '.join(literal(n) for n in sorted(schema.exclude))})")
    return f"filter({names}, x -> {' AND '.join(parts)})" if parts else None
