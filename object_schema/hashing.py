"""Column hashing: one definition of the hash, applied on every path that writes a value.

`hash:` in replication.yaml names text fields whose values are stored as a digest instead, as Fivetran's column
hashing does: `sha256(salt || value)` as 64 lowercase hex characters, with `salt` the secret in `CDC_HASH_SALT`.
Equal values give equal digests in every replica and run (joins and counts still work), and a value cannot be read
back without the salt (a dictionary of likely e-mails cannot be tried against it either). Null and empty values stay
null (Salesforce stores no empty strings).

`hash_text` is the definition and `hash_arrow` its form over Arrow arrays (resync, reconcile and poll rows); the
change rows of the CDC and Datastream paths are hashed in Spark by `hashed_sql` (spark_ops/protect.py), and
tests/spark_ops/test_protect.py checks the three agree value for value. The changefeed exports the replica's
columns, so it carries the digests and never an excluded field. The salt is read when a hash is computed
(`hash_salt`), and a config with `hash:` refuses to load without it (replication/config.py), so no path can write a
value unhashed for want of it.
"""

from __future__ import annotations

import hashlib
import os

import pyarrow as pa

SALT_ENV = "CDC_HASH_SALT"


class MissingSaltError(RuntimeError):
    """`hash:` is configured but CDC_HASH_SALT is not set."""


def hash_salt() -> str:
    """The secret salt of every hash (CDC_HASH_SALT)."""
    salt = os.environ.get(SALT_ENV)
    if not salt:
        raise MissingSaltError(
            f"replication.yaml hashes fields (`hash:`) but {SALT_ENV} is not set: set it to a "
            "long random secret (the same for every process of the platform, kept like a "
            "password; changing it changes every digest, so a replica hashed with another salt "
            "needs a resync)"
        )
    return salt


def hash_text(value: str | None, salt: str) -> str | None:
    """The stored form of a hashed field's value: hex SHA-256 of salt + value (UTF-8); null and "" stay null."""
    return hashlib.sha256((salt + value).encode("utf-8")).hexdigest() if value else None


def hash_arrow(values: pa.Array, salt: str) -> pa.Array:
    """`hash_text` over a string array."""
    return pa.array([hash_text(v, salt) for v in values.cast(pa.string()).to_pylist()], pa.string())
