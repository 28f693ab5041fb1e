"""Column hashing: one definition of the hash, applied on every path that writes a value (issue 19).

`hash:` in replication.yaml names text fields whose values are stored as a digest instead, as Fivetran's column
hashing does: `sha256(salt || value)` as 64 lowercase hex characters, with `salt` the secret in `CDC_HASH_SALT`.
Equal values give equal digests in every replica and run (joins and counts still work), and a value cannot be read
back without the salt (a dictionary of likely e-mails cannot be tried against it either). Null and empty values stay
null (Salesforce stores no empty strings).

The same function in its three forms, which tests/spark_ops/test_protect.py checks agree value for value:
- `hash_text` (Python, hashlib): the definition;
- `hashed_sql` (Spark SQL `sha2(concat(salt, v), 256)`): the CDC and Datastream paths, where change rows are built
  (spark_ops/parse.py, spark_ops/datastream.py), before anything is stored in change_events;
- `hash_arrow` (Arrow arrays): resync, reconcile and poll rows (cdc_assets/records.py `replica_rows`).
The changefeed exports the replica's columns, so it carries the digests and never an excluded field.

Which fields are hashed or left out is `ObjectSchema.hashed` / `.selects` (spark_ops/schema.py). `protected_map_sql`
is the change-row form: the fields map of one object without the fields `fields` leaves out, hashed where `hash`
says. The salt is read when a hash is computed (`hash_salt`), and a config with `hash:` refuses to load without
it (cdc_assets/config.py), so no path can write a value unhashed for want of it.
"""

from __future__ import annotations

import hashlib
import os

import pyarrow as pa

from spark_ops.schema import ObjectSchema
from spark_ops.sql import literal

SALT_ENV = "CDC_HASH_SALT"


class MissingSaltError(RuntimeError):
    """`hash:` is configured but CDC_HASH_SALT is not set."""


def hash_salt() -> str:
    """The secret salt of every hash (CDC_HASH_SALT)."""
    salt = os.environ.get(SALT_ENV)
    if not salt:
        raise MissingSaltError(f"replication.yaml hashes fields (`hash:`) but {SALT_ENV} is not set: set it to a "
                               "long random secret (the same for every process of the platform, kept like a "
                               "password; changing it changes every digest, so a replica hashed with another salt "
                               "needs a resync)")
    return salt


def hash_text(value: str | None, salt: str) -> str | None:
    """The stored form of a hashed field's value: hex SHA-256 of salt + value (UTF-8); null and "" stay null."""
    return hashlib.sha256((salt + value).encode("utf-8")).hexdigest() if value else None


def hashed_sql(value: str, salt: str) -> str:
    """`hash_text` as a Spark SQL expression over the string expression `value`."""
    return f"CASE WHEN {value} IS NULL OR {value} = '' THEN NULL ELSE sha2(concat({literal(salt)}, {value}), 256) END"


def hash_arrow(values: pa.Array, salt: str) -> pa.Array:
    """`hash_text` over a string array."""
    return pa.array([hash_text(v, salt) for v in values.cast(pa.string()).to_pylist()], pa.string())


def protected_map_sql(schema: ObjectSchema, body: str) -> str | None:
    """The fields map `body` (flattened: keys are field names) of `schema`'s object without the fields `fields`
    leaves out and with `hash` fields hashed; None when the object has neither."""
    sql = body
    if schema.include is not None:
        sql = f"map_filter({sql}, (k, v) -> k IN ({', '.join(literal(n) for n in sorted(schema.include))}))"
    if schema.exclude:
        sql = f"map_filter({sql}, (k, v) -> NOT k IN ({', '.join(literal(n) for n in sorted(schema.exclude))}))"
    if schema.hashed:
        names = ", ".join(literal(n) for n in sorted(schema.hashed))
        sql = f"transform_values({sql}, (k, v) -> CASE WHEN k IN ({names}) THEN {hashed_sql('v', hash_salt())} " \
              f"ELSE v END)"
    return None if sql == body else sql


def selected_names_sql(schema: ObjectSchema, names: str) -> str | None:
    """The array of field names `names` without those `fields` leaves out; None when nothing is left out."""
    parts = []
    if schema.include is not None:
        parts.append(f"x IN ({', '.join(literal(n) for n in sorted(schema.include))})")
    if schema.exclude:
        parts.append(f"NOT x IN ({', '.join(literal(n) for n in sorted(schema.exclude))})")
    return f"filter({names}, x -> {' AND '.join(parts)})" if parts else None
