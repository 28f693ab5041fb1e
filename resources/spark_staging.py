"""Where a run puts large Arrow tables for Spark to read: the staging location, and the proof that Spark reads it.

A run builds its inputs in the driver as Arrow (landing lines, a replica's current rows, fetched records) and hands
them to Spark (`resources.spark.from_arrow`). When Spark is not inside the run's process (a Spark Connect server,
or executors on a cluster), a large table goes as a Parquet file written here and the query plan only names the
file. Every executor must then read what this process wrote, at the same path or URI:

- `CDC_SPARK_STAGING`: a directory on storage every machine mounts at the same path (NFS, a shared volume), or an
  object store URI Spark reads with its Hadoop connector (`s3a://bucket/prefix`, `gs://...`, `abfss://...`;
  this process writes it with pyarrow's filesystem, `s3a://` as `s3://`, credentials from the usual `AWS_*`,
  Google or Azure variables);
- unset, as a client of a Spark Connect server on this machine: the temporary directory (a guess, verified below);
- unset otherwise: no staging (the rows travel inside the plan and Spark's tasks, as `createDataFrame` sends them).

A Spark inside the run's process (a local master) reads large tables the same way, from the temporary directory
(`local_staging`; `CDC_SPARK_STAGING` is for executors elsewhere): its executors are threads of this machine's JVM,
so there is nothing to prove, and Parquet read back in columnar batches costs less than a checkpoint of the rows held
in the JVM's heap (bench/RESULTS.md: the 1M-event catch-up in 48.8 s against 55.7 s, peak memory 3.2 against
3.9 GB).

A location that is not shared shows up only on an executor, as a `FileNotFoundException` that Spark retries on
another executor (which may see it) or reports as a task failure deep in a stack trace. So before its first
staged table a process proves the location once: it writes `PROBE_FILES` small files, one token each, and reads
them back through Spark, one task per file spread over the executors, with missing files ignored; a token that does
not come back means an executor did not see its file, and the run stops with `StagingNotShared`, naming the
setting and what to do. (An executor that gets no probe task is not proven; with more executors than probe files a
partly shared mount may pass.)

Each process stages under a directory of its own (`cdc-spark-staging-<host>-<pid>-<random>`; on a local disk made
by `tempfile.mkdtemp`: 0700, its files 0600, so only this user, and a Spark running as this user, reads the rows),
removed when it exits: a DataFrame read from a staged file is lazy, and a server-side relation built on it keeps no
link the client could follow to know when it is gone; a run is a process, so that is the run. On a local or
mounted path, directories of this user's processes of this host that died without cleaning up go when the next one
is made (the host in the name keeps machines sharing a mount from removing each other's); on an object store, give
the prefix a lifecycle rule (expire after a day).
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from resources.storage import open_private

log = logging.getLogger(__name__)

STAGING_ENV = "CDC_SPARK_STAGING"
STAGING_PREFIX = "cdc-spark-staging-"  # + host, process id and a random part: a directory per process
STAGED_ROW_GROUP_BYTES = 4 * 1024 * 1024  # splittable: Spark reads a staged file with as many tasks as it has cores
PROBE_FILES = 8  # one task each: enough to reach every executor of a small cluster in one job


class StagingNotShared(RuntimeError):
    """The staging location is not readable by Spark's executors."""


@dataclass(frozen=True)
class Staging:
    """This process's staging directory: `uri` as Spark reads it, `path` on `filesystem` as pyarrow writes it."""

    uri: str
    filesystem: pafs.FileSystem
    path: str
    configured: bool  # from CDC_SPARK_STAGING (else the temporary directory, guessed)

    def child(self, name: str) -> tuple[str, str]:
        return f"{self.uri.rstrip('/')}/{name}", f"{self.path.rstrip('/')}/{name}"


def staging_location() -> Staging | None:
    """This process's staging directory, made on first use; None when there is no location Spark could read."""
    global _process_staging
    if _process_staging is not None:
        return _process_staging
    root = os.environ.get(STAGING_ENV)
    configured = root is not None
    if root is None:
        host = urlparse(os.environ.get("SPARK_REMOTE", "")).hostname
        if not host or not _is_this_machine(host):
            return None
        root = tempfile.gettempdir()
    _process_staging = _make(root, configured)
    return _process_staging


def _make(root: str, configured: bool) -> Staging:
    """A directory of this process's own under `root` (a path or URI), removed when the process exits."""
    filesystem, root_path, root_uri = _resolve(root)
    filesystem.create_dir(root_path, recursive=True)
    prefix = f"{STAGING_PREFIX}{_host()}-{os.getpid()}-"
    if isinstance(filesystem, pafs.LocalFileSystem):
        _remove_dead_processes_dirs(filesystem, root_path)
        name = Path(tempfile.mkdtemp(prefix=prefix, dir=root_path)).name  # 0700, a name nobody could take first
    else:
        name = f"{prefix}{uuid.uuid4().hex[:8]}"
        filesystem.create_dir(f"{root_path.rstrip('/')}/{name}")
    staging = Staging(f"{root_uri.rstrip('/')}/{name}", filesystem, f"{root_path.rstrip('/')}/{name}", configured)
    atexit.register(_remove, staging)
    return staging


def local_staging() -> Staging:
    """This process's staging directory for a Spark inside it (a local master): under the temporary directory,
    made on first use, readable by its executors by construction (no probe)."""
    global _local_staging
    if _local_staging is None:
        _local_staging = _make(tempfile.gettempdir(), configured=False)
        _proven.add(_local_staging.uri)
    return _local_staging


_process_staging: Staging | None = None
_local_staging: Staging | None = None
_proven: set[str] = set()  # staging URIs this process has proven readable by the executors


def staged(spark: SparkSession, table: pa.Table, staging: Staging) -> DataFrame:
    """`table` written as one Parquet file under `staging`, read back lazily by Spark."""
    prove_shared(spark, staging)
    uri, path = staging.child(f"{uuid.uuid4().hex}.parquet")
    rows_per_group = max(1, table.num_rows * STAGED_ROW_GROUP_BYTES // max(table.nbytes, 1))
    _create_private(staging, path)
    pq.write_table(table, path, filesystem=staging.filesystem, row_group_size=rows_per_group)
    return spark.read.schema(from_arrow_schema(table.schema)).parquet(uri)


def prove_shared(spark: SparkSession, staging: Staging) -> None:
    """Once per process and location: Spark's executors read files this process wrote there, or StagingNotShared."""
    if staging.uri in _proven:
        return
    name = f"probe-{uuid.uuid4().hex}"  # not `_` or `.`: Spark skips such names when it lists a directory
    uri, path = staging.child(name)
    tokens = {uuid.uuid4().hex for _ in range(PROBE_FILES)}
    staging.filesystem.create_dir(path)
    for i, token in enumerate(sorted(tokens)):
        _create_private(staging, f"{path}/{i}.txt")
        with staging.filesystem.open_output_stream(f"{path}/{i}.txt") as out:
            out.write(token.encode())
    error: Exception | None = None
    try:
        read = {row.value for row in spark.read.option("ignoreMissingFiles", "true").text(uri).collect()}
    except Exception as exc:  # noqa: BLE001 (any failure to read is the answer; it is raised below as the cause)
        read, error = set(), exc
    finally:
        staging.filesystem.delete_dir(path)
    if read != tokens:
        reason = (
            f"Spark failed to read them: {_first_line(error)}"
            if error is not None
            else f"its executors read {len(read & tokens)} of {len(tokens)}"
        )
        raise StagingNotShared(_not_shared_message(staging, reason)) from error
    _proven.add(staging.uri)
    log.info("Spark staging at %s: readable by the executors (%d probe files)", staging.uri, len(tokens))


def _create_private(staging: Staging, path: str) -> None:
    """On a local disk, create `path` empty and readable by this user only before pyarrow writes it: pyarrow
    creates a file with the umask's mode, and keeps the mode of one that exists."""
    if isinstance(staging.filesystem, pafs.LocalFileSystem):
        open_private(Path(path)).close()


def _not_shared_message(staging: Staging, reason: str) -> str:
    where = (
        f"{STAGING_ENV}={os.environ.get(STAGING_ENV)}"
        if staging.configured
        else f"the temporary directory {staging.uri} (the default, {STAGING_ENV} being unset, for a Spark Connect "
        f"server on this machine)"
    )
    return (
        f"Spark staging is not shared: this process wrote {PROBE_FILES} probe files under {where} and {reason}. "
        f"Large Arrow tables reach Spark as Parquet files there, so every Spark executor (and the Spark Connect "
        f"server) must see that location at the same path, as the user this process runs as (on a local disk the "
        f"staging directory is private to it: 0700): set {STAGING_ENV} to a directory all machines mount "
        f"at the same path, or to an object store URI Spark can read (s3a://bucket/prefix, gs://..., "
        f"abfss://...)."
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


def _resolve(root: str) -> tuple[pafs.FileSystem, str, str]:
    """(pyarrow filesystem, path on it, URI for Spark) of a staging root given as a path or URI."""
    scheme = urlparse(root).scheme
    if len(scheme) <= 1:  # a path (a Windows drive letter parses as a one-letter scheme)
        path = os.path.abspath(root)
        return pafs.LocalFileSystem(), path, path
    # Hadoop's S3 connector is s3a://; pyarrow knows the same bucket as s3://.
    filesystem, path = pafs.FileSystem.from_uri("s3://" + root[len("s3a://") :] if scheme == "s3a" else root)
    return filesystem, path, root


def _remove(staging: Staging) -> None:
    try:
        staging.filesystem.delete_dir(staging.path)
    except (FileNotFoundError, OSError) as exc:
        log.warning("Spark staging %s not removed: %s", staging.uri, exc)


def _remove_dead_processes_dirs(filesystem: pafs.FileSystem, root: str) -> None:
    mine = f"{STAGING_PREFIX}{_host()}-"
    for info in filesystem.get_file_info(pafs.FileSelector(root)):
        if (
            info.type == pafs.FileType.Directory
            and info.base_name.startswith(mine)
            and not _alive(info.base_name.removeprefix(mine).split("-")[0])
            and _mine(info.path)
        ):
            filesystem.delete_dir(info.path)


def _mine(path: str) -> bool:
    """A directory of this user (in a shared temporary folder, another user's cannot be removed, nor is ours to)."""
    try:
        return os.lstat(path).st_uid == os.getuid()
    except FileNotFoundError:
        return False


def _host() -> str:
    return socket.gethostname().replace("/", "_")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _is_this_machine(host: str) -> bool:
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
