"""A folder on a local disk or on an object store (s3://, gs://, abfs://), through `pyarrow.fs`: one way to list,
read and publish the platform's small files wherever they live.

The landing zone, the changefeed and the subscriber's state (positions, status, dead letters) are folders of
files that become visible **whole or not at all** and are never seen half-written:

- on a local disk: write a hidden temporary file, fsync it, rename it into place, fsync the folder;
- on an object store: one upload. An object appears only when its upload completes (a single PUT, or the last
  call of a multipart upload), and replacing an object is atomic for readers, so there is nothing to rename.

On a local disk every file is created private to the user the process runs as (0600, its folders 0700), whatever
the umask: they hold org data (events, positions, raw payloads). `private_dirs` and `open_private` are the one
way the platform's writers create them.

A local path and a URI are told apart by `://`. Credentials and endpoints of an object store come from the
environment, as for delta-rs (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, ... for S3;
`GOOGLE_APPLICATION_CREDENTIALS` for GCS; `AZURE_STORAGE_ACCOUNT_NAME` / `..._KEY` for Azure: docs/scaling.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyarrow.fs as pafs

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
# The umask of every process that loads the definitions or subscribes: files created with no mode of their own
# (delta-rs's tables, Spark's and the staging's Parquet, Dagster's run logs and event storage) come out 0600, 0700.
PRIVATE_UMASK = 0o077


def is_uri(location: str | Path) -> bool:
    """True for an object-store URI (`s3://bucket/prefix`), False for a local path."""
    return "://" in str(location)


def filesystem(location: str | Path) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `location` and its path there (no trailing '/'); a local path is made absolute."""
    if is_uri(location):
        fs, path = pafs.FileSystem.from_uri(str(location))
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), str(Path(location).resolve())


def join(location: str | Path, *names: str) -> str:
    """`location/name/...` as a string; unlike Path, keeps a URI's `//`."""
    return "/".join([str(location).rstrip("/"), *names])


class Folder:
    """The files inside one folder (local directory or object-store prefix); a name may hold '/' (a file below)."""

    def __init__(self, location: str | Path):
        self.location = str(location)
        self.fs, self.root = filesystem(location)
        self.local = not is_uri(location)

    def __str__(self) -> str:
        return self.location

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def names(self, *, prefix: str = "", suffix: str = "") -> list[str]:
        """Names of the files in the folder (not below), sorted; none when the folder does not exist."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return sorted(
            i.base_name
            for i in infos
            if i.type == pafs.FileType.File and i.base_name.startswith(prefix) and i.base_name.endswith(suffix)
        )

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.path(name)).type == pafs.FileType.File

    def read_bytes(self, name: str) -> bytes | None:
        """The file's content; None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(name), compression=None) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    def read_text(self, name: str) -> str | None:
        data = self.read_bytes(name)
        return None if data is None else data.decode("utf-8")

    def write_atomically(self, name: str, data: bytes | str, *, durable: bool = True) -> None:
        """Replace (or create) `name` so that a crash or a reader sees the old content or the new, never a mix.
        `durable=False` skips the fsyncs on a local disk (for a file rewritten every second, such as a status)."""
        data = data.encode("utf-8") if isinstance(data, str) else data
        if self.local:
            write_local_durably(Path(self.path(name)), data, durable=durable)
            return
        with self.fs.open_output_stream(self.path(name), compression=None) as out:
            out.write(data)

    def upload(self, source: Path, name: str) -> None:
        """Copy the local file `source` to `name` in one upload (an object store shows it only once complete)."""
        with source.open("rb") as data, self.fs.open_output_stream(self.path(name), compression=None) as out:
            while chunk := data.read(8 << 20):
                out.write(chunk)

    def walk(self) -> Iterator[tuple[str, int]]:
        """(path relative to the folder, size) of every file at any depth; nothing when the folder is missing."""
        for info in self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File:
                yield info.path[len(self.root) :].lstrip("/"), info.size


def write_local_durably(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` on a local disk: write a hidden temporary file, fsync, rename, fsync the folder
    (without the fsyncs when not `durable`: still atomic for readers, but a power loss may keep the old content)."""
    private_dirs(path.parent)
    temp = path.with_name("." + path.name)
    with open_private(temp) as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_private() -> None:
    """From now on, what this process and the processes it starts create is private to its user (`PRIVATE_UMASK`,
    added to the bits the umask already clears).

    Set rather than asked for: the code location and its run workers are started by Dagster's CLI (`dg dev`,
    `dagster code-server start`, a run launcher) from whatever shell or service started it, and a user's usual
    umask (022) would leave the org's rows readable by every local user in Delta files, changefeeds and run logs.
    """
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)


def close_folder(folder: str | Path | None) -> None:
    """`folder` (when it is a folder this user owns, not a link) made 0700: what other processes created in it
    under their own umask cannot be reached by other users. For DAGSTER_HOME, whose run and schedule databases
    the webserver, the daemon or the CLI create before any of them loads the definitions."""
    if not folder:
        return
    info = os.lstat(folder) if os.path.lexists(folder) else None
    if info and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
        os.chmod(folder, PRIVATE_DIR)


def private_dirs(folder: Path) -> None:
    """Create `folder` and every missing parent 0700 (`Path.mkdir(parents=True)` would give the parents the
    umask's mode); folders that exist are left as they are."""
    missing = []
    for path in [folder, *folder.parents]:
        if path.is_dir():
            break
        missing.append(path)
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_DIR, exist_ok=True)  # exists: made by another writer meanwhile


def open_private(path: Path, *, dir_fd: int | None = None) -> IO[bytes]:
    """`path` (relative to `dir_fd` when given) opened for writing from its start (created or truncated), readable
    and writable by this user only, whatever the umask or the mode of a stale file of the same name; a link in its
    place is refused, never followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, PRIVATE_FILE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, PRIVATE_FILE)
        return os.fdopen(fd, "wb")
    except OSError:  # the descriptor is closed, the error raised as it is
        os.close(fd)
        raise
