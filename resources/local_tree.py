"""A local folder tree walked, read, moved and deleted without ever following a symbolic link.

Anyone who may write the landing zone may put a symbolic link in it. Followed, a link to `/etc/...` or to a key
file would be read into `_quarantine`, and retiring it would move or delete its target outside the zone. So every
operation here opens its path one component at a time from the tree's root, each with `O_NOFOLLOW` (a link in any
component fails instead of being followed), and acts on the last component through its folder's descriptor
(`dir_fd`): a link swapped in between a listing and a read is refused too, not raced. The root itself is the
operator's setting and may be a link.

Only regular files are opened (a FIFO named `x.jsonl` would block a read forever); `Refused` says why not.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(OSError):
    """A path that goes through a symbolic link, or names something other than a regular file: not touched."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the root, '/'-separated
    kind: str  # "file", "dir", "link" or "other" (a FIFO, socket or device)
    size: int
    mtime: float
    mtime_ns: int = 0  # the same, exact: with the size, the ledger's identity of a landed file


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


class LocalTree:
    def __init__(self, root: str):
        self.root = root

    @contextmanager
    def _folder(self, parts: list[str]) -> Iterator[int]:
        """A descriptor of the folder `parts` below the root, reached without following a link."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for n, name in enumerate(parts, 1):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        where = os.path.join(self.root, *parts[:n])
                        raise Refused(exc.errno, f"{where} is a symbolic link or not a folder; not followed") from exc
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def walk(self, descend=lambda path: True) -> Iterator[Entry]:
        """Every entry below the root (links reported, never followed); folders are entered when `descend(path)`."""
        stack = [""]
        while stack:
            folder = stack.pop()
            try:
                with self._folder(folder.split("/") if folder else []) as fd:
                    found = [(e.name, e.stat(follow_symlinks=False)) for e in os.scandir(fd)]
            except FileNotFoundError:
                continue  # removed since it was listed
            except Refused:
                yield Entry(folder, "link", 0, 0.0)  # swapped for a link since it was listed
                continue
            for name, st in found:
                entry = Entry(
                    f"{folder}/{name}" if folder else name, _kind(st.st_mode), st.st_size, st.st_mtime, st.st_mtime_ns
                )
                if entry.kind == "dir":
                    if descend(entry.path):
                        stack.append(entry.path)
                    continue
                yield entry

    @contextmanager
    def open(self, path: str) -> Iterator[BinaryIO]:
        """The regular file `path` for reading; `Refused` if it or a folder on the way is a link, or it is not a
        regular file."""
        *parts, name = path.split("/")
        with self._folder(parts) as folder:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Refused(exc.errno, f"{path} is a symbolic link; not followed") from exc
                raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Refused(errno.EINVAL, f"{path} is not a regular file")
            os.set_blocking(fd, True)
        except OSError:  # Refused included: the descriptor is closed, the error raised
            os.close(fd)
            raise
        with os.fdopen(fd, "rb", buffering=0) as handle:
            yield handle

    def _regular(self, folder: int, name: str, path: str) -> None:
        if not stat.S_ISREG(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            raise Refused(errno.EINVAL, f"{path} is a symbolic link or not a regular file; left alone")

    def delete(self, path: str) -> None:
        """Delete the regular file `path` (never what a link points to)."""
        *parts, name = path.split("/")
        with self._folder(parts) as folder:
            self._regular(folder, name, path)
            os.unlink(name, dir_fd=folder)

    def move_to(self, path: str, target: LocalTree, target_path: str) -> None:
        """Move the regular file `path` to `target_path` in `target`, folders made as needed; never replaces a file
        there (`FileExistsError`). A hard link then an unlink, so two movers cannot overwrite each other."""
        *parts, name = path.split("/")
        *target_parts, target_name = target_path.split("/")
        with self._folder(parts) as folder:
            self._regular(folder, name, path)
            os.makedirs(target.root, mode=0o700, exist_ok=True)
            with target.made(target_parts) as into:
                try:
                    os.link(name, target_name, src_dir_fd=folder, dst_dir_fd=into, follow_symlinks=False)
                except FileExistsError:
                    if not _same_file(name, folder, target_name, into):
                        raise
                    # Linked by a move that died before its unlink: finish it.
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP):
                        raise
                    # A filesystem without hard links: a rename after a look (one upkeep runs at a time).
                    if exists(target_name, into):
                        raise FileExistsError(errno.EEXIST, f"{target_path} exists") from exc
                    os.rename(name, target_name, src_dir_fd=folder, dst_dir_fd=into)
                    return
                os.unlink(name, dir_fd=folder)

    @contextmanager
    def made(self, parts: list[str]) -> Iterator[int]:
        """A descriptor of the folder `parts` below the root, missing folders made (0700) on the way, none reached
        through a link (`Refused`): for a writer into a folder others write too (the CDC subscriber's hour folders,
        the landing archive), which then creates and renames its files relative to it."""
        for n in range(len(parts)):
            with self._folder(parts[:n]) as fd, suppress(FileExistsError):
                os.mkdir(parts[n], mode=0o700, dir_fd=fd)
        with self._folder(parts) as fd:
            yield fd


def _same_file(name: str, folder: int, other: str, other_folder: int) -> bool:
    a = os.stat(name, dir_fd=folder, follow_symlinks=False)
    b = os.stat(other, dir_fd=other_folder, follow_symlinks=False)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def exists(name: str, folder: int) -> bool:
    """Whether `name` is taken in the folder `folder` (by anything, a link included)."""
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
