"""Safe Delta commits on an object store: refuse to write a warehouse where two writers could both commit a version.

A Delta commit is the file `_delta_log/<version>.json`. Two writers that read the same version both try to create
the next one; the store must let exactly one succeed and tell the other, which then re-reads, finds what the
winner wrote, and either retries on top of it or fails with a conflict (`resources/delta.py`, "One writer per
table"). A local disk does this with rename-if-absent. An object store does it with a **conditional put**
(`If-None-Match: *`: create only if absent), which delta-rs (>= 0.23; the installed 1.x always) uses on S3, GCS and
Azure with no lock service: this is the mechanism the platform relies on. A store that *ignores* the condition
lets the second writer overwrite the first one's commit: its data files stay orphaned, its checkpoint (which files
were ingested, how far a replica applied) vanishes, and events are lost or applied twice, silently.

So, before a run writes to a warehouse on an object store (`ensure_safe_commits`, called by the warehouse
resource when a run starts, and by the definitions for the static part):

1. **Settings that turn the guarantee off are refused**, from the environment or the storage options:
   `AWS_S3_ALLOW_UNSAFE_RENAME` (older delta-rs then committed with a plain put), `AWS_S3_LOCKING_PROVIDER` (the
   DynamoDB lock, no longer implemented by delta-rs 1.x: a user setting it believes in a lock that does not
   exist), and `AWS_CONDITIONAL_PUT=disabled` (every commit would fail, after a run did its work).
2. **The store is probed once per process and warehouse**: `<root>/_commit_probe/<uuid>` is created with a
   conditional put, then put again with the same condition. The store must refuse the second put; a store that
   accepts it ignores conditional writes, and nothing is written. The probe uses `obstore`, the Python binding of
   the Rust `object_store` crate through which delta-rs writes its commits (`PutMode::Create`), with the same
   settings (the AWS_* / GOOGLE_* / AZURE_* environment and the warehouse's storage options), so it asks the store
   exactly what a commit asks, on S3, an S3-compatible store, GCS or Azure alike. (delta-rs itself cannot be
   made to race deterministically: it lists the log just before each commit, so only writers that list within
   milliseconds of each other collide; that is when an unsafe store loses one of them.) It costs two PUTs and a
   DELETE, once per run process.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping

import obstore
import obstore.exceptions
import obstore.store

from resources.storage import is_uri, join

log = logging.getLogger(__name__)

PROBE_FOLDER = "_commit_probe"
S3_SCHEMES = ("s3://", "s3a://")
DOCS = "docs/scaling.md, 'Object storage'"
# (names of the setting: environment variable, then storage-option spellings), is it unsafe for this value, why
UNSAFE_SETTINGS = (
    (
        ("AWS_S3_ALLOW_UNSAFE_RENAME", "aws_s3_allow_unsafe_rename", "allow_unsafe_rename"),
        lambda v: v.strip().lower() in ("1", "true", "yes", "on"),
        "it asks delta-rs to commit to S3 without put-if-absent, so two writers of a table could both commit a "
        "version and one would silently overwrite the other",
    ),
    (
        ("AWS_S3_LOCKING_PROVIDER", "aws_s3_locking_provider", "locking_provider"),
        lambda v: bool(v.strip()),
        "the installed delta-rs has no locking provider (its DynamoDB lock was removed): commits are coordinated by "
        "S3 conditional writes, and a setting that promises a lock would be silently ignored",
    ),
    (
        ("AWS_CONDITIONAL_PUT", "aws_conditional_put", "conditional_put"),
        lambda v: v.strip().lower() == "disabled",
        "without conditional put delta-rs cannot create a commit file only if it is absent, so every commit would "
        "fail, after the run did its work",
    ),
)

# Settings object_store (obstore) does not know, left out of the probe's configuration: delta-rs's own, and the
# `provider` tag of dagster-deltalake's storage config classes.
DELTA_RS_ONLY = {n.lower() for names, _, _ in UNSAFE_SETTINGS for n in names} | {
    "aws_force_credential_load",
    "provider",
}
_probed: set[tuple[str, tuple[tuple[str, str], ...]]] = set()


class UnsafeCommitsError(RuntimeError):
    """The warehouse's store or settings would let two writers commit the same Delta version."""


def unsafe_settings(root: str, options: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """Why the settings in force for a warehouse at `root` are unsafe (empty: they are not). Only S3 has them."""
    if not str(root).startswith(S3_SCHEMES):
        return []
    lowered = {k.lower(): v for k, v in options.items()}
    problems = []
    for names, unsafe, why in UNSAFE_SETTINGS:
        for name in names:
            value, where = (
                (environ.get(name), "environment variable") if name.isupper() else (lowered.get(name), "storage option")
            )
            if value is not None and unsafe(str(value)):
                problems.append(f"{where} {name}={value}: {why}")
    return problems


def refuse_unsafe_settings(root: str, options: Mapping[str, str]) -> None:
    """Raise UnsafeCommitsError naming every setting that would allow unsafe commits to the warehouse at `root`."""
    if problems := unsafe_settings(root, options):
        raise UnsafeCommitsError(
            f"Refusing to write the Delta warehouse {root}: "
            + "; ".join(problems)
            + f". Unset it: delta-rs coordinates writers with S3 conditional writes (If-None-Match), which AWS S3 "
            f"and most S3-compatible stores support (see {DOCS})."
        )


def probe_conditional_put(root: str, options: Mapping[str, str]) -> None:
    """Put one object twice with `If-None-Match: *` (obstore `mode="create"`, delta-rs's `PutMode::Create`); the
    store must refuse the second (module docstring). Raises UnsafeCommitsError when it does not, or when the
    probe cannot be made."""
    config = {k: v for k, v in options.items() if k.lower() not in DELTA_RS_ONLY}
    name = f"{PROBE_FOLDER}/{uuid.uuid4().hex}"
    try:
        # The user's storage options, checked by obstore at run time; its stubs want one store's TypedDict.
        store = obstore.store.from_url(root, config=config or None)  # type: ignore[arg-type]
        obstore.put(store, name, b"first writer", mode="create")
    except (obstore.exceptions.BaseError, ValueError, OSError) as exc:
        raise UnsafeCommitsError(
            f"Refusing to write the Delta warehouse {root}: could not verify that its store refuses a second commit "
            f"of the same version (a conditional put of {join(root, name)} failed: {type(exc).__name__}: {exc}). "
            f"Check the credentials and the store's support for conditional writes (see {DOCS})."
        ) from exc
    try:
        obstore.put(store, name, b"second writer", mode="create")
    except obstore.exceptions.AlreadyExistsError:
        return  # refused: a commit file is created only if absent
    finally:
        _remove(store, root, name)
    raise UnsafeCommitsError(
        f"Refusing to write the Delta warehouse {root}: its object store accepted a second conditional put "
        f"(If-None-Match: *) of {join(root, name)}, which already existed. It ignores conditional writes, so two "
        f"runs committing the same version of a table would both succeed, one overwriting the other's commit, and "
        f"data would be lost without an error. Use a store that honours conditional writes (AWS S3, GCS, Azure, "
        f"MinIO, Cloudflare R2, ...; see {DOCS})."
    )


def _remove(store, root: str, name: str) -> None:
    try:
        obstore.delete(store, name)
    except obstore.exceptions.BaseError as exc:  # a leftover probe object is harmless: say so and go on
        log.warning("could not delete the commit probe %s (%s); it is safe to delete by hand", join(root, name), exc)


def ensure_safe_commits(root: str, options: Mapping[str, str]) -> None:
    """Refuse unsafe settings, then probe the store once per process (per warehouse and settings). A local
    warehouse needs neither: delta-rs commits there with an atomic rename-if-absent."""
    if not is_uri(root):
        return
    refuse_unsafe_settings(root, options)
    key = (root, tuple(sorted({**options, "endpoint": os.environ.get("AWS_ENDPOINT_URL", "")}.items())))
    if key not in _probed:
        probe_conditional_put(root, options)
        _probed.add(key)
