"""Lands decoded events as files in the landing zone (docs/design/contract.md §2), and says when each file is durable.

Lines go to ``YYYY/MM/DD/HH/_<name>.jsonl`` (invisible) and the file is renamed to ``<name>.jsonl`` when it is
rolled, after an ``fsync`` of the file (and then of its directory): once renamed, its events survive a crash.
``on_landed(path, lines, replay_id)`` is then called with the last replay id in the file: that is the only moment the
subscriber may move its durable position (a crash before it re-lands events, which dedup absorbs; it never skips).

A file rolls by size or age, but only between transactions (before an event of a new ``transactionKey``), so a
transaction's events land in one file as the platform prefers; an idle stream rolls its open file once it is
old enough and no event came for ``quiet_seconds`` (the transaction is then complete in practice; if it was not,
the platform's ``transaction_close_after`` still handles a transaction split across files).

``<name>`` is the first event's commit timestamp and replay id: names sort by time, and a name taken by a file
landed before a crash gets a ``-<n>`` suffix (a visible file is immutable, never overwritten).

**On an object store** (the landing zone an ``s3://``, ``gs://`` or ``abfs://`` URI) there is no rename: the open
file is written in a local spool folder (``spool_dir``, the same ``YYYY/MM/DD/HH/_<name>.jsonl`` layout) and rolled
by one upload to ``<zone>/YYYY/MM/DD/HH/<name>.jsonl``, which the store shows only once complete, whole. The
position moves only after the upload returned, exactly as after a rename. A crash loses at most the spooled file,
whose events were never acknowledged (they come again); ``discard_orphans`` clears the spool.

**Through no link.** Other writers share the zone (docs/design/contract.md §2), and one of them may plant a
symbolic link where an hour folder belongs: followed, the events would land outside the zone, where the platform
never reads them (it lists the zone without following links), and the position would move past them: lost. The
hour folder is opened part by part without following links (``resources/local_tree.py`` ``LocalTree.made``) and
the open file is created, renamed and synced relative to that descriptor; a link raises ``Refused``, so the write
fails, nothing lands, the position stays, and the stream reports FAILED naming the link and retries until it is
removed.

**Private.** Files are created 0600 and folders 0700 whatever the umask (``resources/storage.py``): they hold org
data. The default spool is a folder of the process's own (:func:`private_spool`: ``tempfile.mkdtemp``, so 0700 and
an unpredictable name in the shared temporary folder), removed when the subscriber stops; the spools of
subscribers that died are removed by the next one to start.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from resources.local_tree import LocalTree, exists
from resources.storage import Folder, is_uri, join, open_private, private_dirs
from shared.faults import fault_point

log = logging.getLogger(__name__)

SPOOL_PREFIX = "cdc-subscriber-spool-"  # + process id, topic slug and a random part: one folder per process


@dataclass
class _OpenFile:
    temp: Path
    folder: Path
    folder_fd: int  # the folder, opened through no link: the file is created, renamed and synced relative to it
    held: ExitStack  # holds `folder_fd` open until the file is rolled
    relative: str  # the folder under the zone: YYYY/MM/DD/HH
    stem: str
    handle: IO[bytes]
    opened: float
    size: int = 0
    lines: int = 0
    last_replay: bytes | None = None
    last_key: str | None = None


class LandingFileWriter:
    def __init__(
        self,
        root: Path | str,
        on_landed: Callable[[Path | str, int, bytes | None], None],
        *,
        max_bytes: int = 8 << 20,
        max_age_seconds: float = 2.0,
        quiet_seconds: float = 0.2,
        spool_dir: Path | None = None,
    ):
        self.zone = None if not is_uri(root) else Folder(root)  # None: a local zone, landed by rename
        if self.zone is None:
            self.root = Path(root)  # where open files are written
        elif spool_dir is None:
            raise ValueError(f"landing zone {root} is on an object store: give a local spool_dir for open files")
        else:
            self.root = Path(spool_dir)
        private_dirs(self.root)
        self.on_landed = on_landed
        self.max_bytes, self.max_age_seconds, self.quiet_seconds = max_bytes, max_age_seconds, quiet_seconds
        self.lock = threading.RLock()
        self.files_landed = 0
        self._current: _OpenFile | None = None
        self._last_write = 0.0

    @property
    def pending(self) -> bool:
        """True while written events wait in an open (invisible) file."""
        return self._current is not None

    def write(self, line: str, commit_ts: int, transaction_key: str, replay_id: bytes | None) -> None:
        data = (line + "\n").encode()
        with self.lock:
            current = self._current
            if current is not None and transaction_key != current.last_key and self._due(current):
                self.roll()
            if self._current is None:
                self._current = self._open(commit_ts, replay_id)
            current = self._current
            current.handle.write(data)
            current.size += len(data)
            current.lines += 1
            current.last_key = transaction_key
            if replay_id is not None:
                current.last_replay = replay_id
            self._last_write = time.monotonic()

    def _due(self, current: _OpenFile) -> bool:
        return current.size >= self.max_bytes or time.monotonic() - current.opened >= self.max_age_seconds

    def tick(self) -> None:
        """Roll an open file that is old enough once the stream has been quiet (called from a timer)."""
        with self.lock:
            if (
                self._current is not None
                and self._due(self._current)
                and time.monotonic() - self._last_write >= self.quiet_seconds
            ):
                self.roll()

    def _open(self, commit_ts: int, replay_id: bytes | None) -> _OpenFile:
        stamp = dt.datetime.fromtimestamp(commit_ts / 1000, tz=dt.UTC)
        relative = stamp.strftime("%Y/%m/%d/%H")
        stem = f"{commit_ts:013d}-{int.from_bytes(replay_id or b'', 'big'):016d}"
        temp = self.root / relative / f"_{stem}-{os.getpid()}.jsonl"
        private_dirs(self.root)  # the zone itself is the deployment's (it may be a link): made again if it went
        with ExitStack() as held:
            folder_fd = held.enter_context(LocalTree(str(self.root)).made(relative.split("/")))
            handle = open_private(Path(temp.name), dir_fd=folder_fd)
            return _OpenFile(temp, temp.parent, folder_fd, held.pop_all(), relative, stem, handle, time.monotonic())

    def roll(self) -> Path | str | None:
        """Make the open file visible (durably) and report it; None when nothing was open."""
        with self.lock:
            current, self._current = self._current, None
            if current is None:
                return None
            try:
                current.handle.flush()
                os.fsync(current.handle.fileno())
                current.handle.close()
                final = self._publish(current)
            finally:
                current.held.close()
            fault_point("subscriber.after_rename")  # landed, position not saved yet: these events come again
            self.files_landed += 1
            self.on_landed(final, current.lines, current.last_replay)
            return final

    def _publish(self, current: _OpenFile) -> Path | str:
        """Rename the open file into the local zone, or upload it to the object store; never over a visible file
        (one landed before a crash under the same name: this one gets a ``-<n>`` suffix)."""
        names = (f"{current.stem}{f'-{n}' if n else ''}.jsonl" for n in range(1_000_000))
        fd = current.folder_fd
        if self.zone is None:
            final = next(n for n in names if not exists(n, fd))
            os.replace(current.temp.name, final, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)
            return current.folder / final
        name = next(f"{current.relative}/{n}" for n in names if not self.zone.exists(f"{current.relative}/{n}"))
        self.zone.upload(current.temp, name)
        os.unlink(current.temp.name, dir_fd=fd)
        return join(self.zone.location, name)

    def discard_orphans(self) -> int:
        """Remove in-flight files a killed subscriber left (their events were never acknowledged: they come
        again). Only this writer's naming (``_<ts>-<replay>-<pid>.jsonl``) of processes no longer alive."""
        removed = 0
        for path in self.root.rglob("_*.jsonl"):
            parts = path.name[1:].removesuffix(".jsonl").split("-")
            if len(parts) == 3 and all(p.isdigit() for p in parts) and not _alive(int(parts[2])):
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def private_spool(slug: str) -> Path:
    """A new spool folder of this process's own in the temporary folder (0700, an unpredictable name), after
    removing those of subscribers that died."""
    remove_dead_spools()
    return Path(tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-{slug}-"))


def remove_dead_spools() -> int:
    """Remove the spool folders :func:`private_spool` made for processes no longer alive: only real folders (not
    links) of this user, named by it; their files were never acknowledged (their events come again)."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*"):
        pid = path.name.removeprefix(SPOOL_PREFIX).split("-")[0]
        try:
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(path)
                removed += 1
        except FileNotFoundError:  # removed meanwhile by another subscriber starting
            continue
        except OSError as exc:  # not ours to remove after all: the next start tries again
            log.warning("spool folder %s of a stopped subscriber not removed: %s", path, exc)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
