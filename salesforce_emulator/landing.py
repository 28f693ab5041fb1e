"""Writes CDC event lines into the landing zone the way a careful subscriber does (docs/design/contract.md §2).

Lines go to ``YYYY/MM/DD/HH/_<name>.jsonl`` (invisible: names starting with ``_`` are never read) and the file
is renamed to ``<name>.jsonl`` when it is rolled: by size, by age (a background tick), or on ``flush()``.
A transaction's lines always land in one file. ``<name>`` is the first commit timestamp in the file plus a
counter, so names sort by time and never collide across restarts (the commit clock is persisted).
Landing faults (duplicate and late files) are applied at publish time. A writer built with ``enabled=False``
writes nothing (the emulator then only serves its events over the Pub/Sub API, for a subscriber to land).
Files are created 0600 and folders 0700, as the platform's own writers do (``resources/storage.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from resources.storage import open_private, private_dirs
from salesforce_emulator.faults import FaultConfig

log = logging.getLogger(__name__)


@dataclass
class _OpenFile:
    temp: Path
    final: Path
    handle: IO[bytes]
    opened: float
    size: int = 0


@dataclass
class _HeldFile:
    temp: Path
    final: Path
    countdown: int


class LandingWriter:
    def __init__(
        self,
        root: Path,
        faults: FaultConfig,
        rng: random.Random,
        *,
        max_bytes: int = 8 << 20,
        max_age_seconds: float = 2.0,
        enabled: bool = True,
    ):
        self.root = Path(root)
        self.enabled = enabled
        if enabled:
            private_dirs(self.root)
        self.faults = faults
        self.rng = rng
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self.lock = threading.RLock()
        self.published: list[Path] = []
        self._current: _OpenFile | None = None
        self._held: list[_HeldFile] = []
        self._counter = 0

    def write(self, lines: list[str], commit_ts: int) -> None:
        if not lines or not self.enabled:
            return
        data = ("\n".join(lines) + "\n").encode()
        with self.lock:
            if self._current is None:
                self._current = self._open(commit_ts)
            self._current.handle.write(data)
            self._current.size += len(data)
            if self._current.size >= self.max_bytes:
                self.roll()

    def _open(self, commit_ts: int) -> _OpenFile:
        self._counter += 1
        stamp = dt.datetime.fromtimestamp(commit_ts / 1000, tz=dt.UTC)
        folder = self.root / stamp.strftime("%Y/%m/%d/%H")
        private_dirs(folder)
        name = f"{commit_ts:013d}-{self._counter:06d}.jsonl"
        temp = folder / f"_{name}"
        return _OpenFile(temp, folder / name, open_private(temp), time.monotonic())

    def maybe_roll(self) -> None:
        """Roll the open file if it is older than ``max_age_seconds`` (called from a background tick)."""
        with self.lock:
            if self._current is not None and time.monotonic() - self._current.opened >= self.max_age_seconds:
                self.roll()

    def roll(self) -> None:
        with self.lock:
            current, self._current = self._current, None
            if current is None:
                return
            current.handle.close()
            for held in self._held:
                held.countdown -= 1
            if self.faults.late_file_fraction and self.rng.random() < self.faults.late_file_fraction:
                self._held.append(_HeldFile(current.temp, current.final, self.faults.late_after_files))
                log.info("landing fault: holding back %s", current.final.name)
            else:
                self._publish(current.temp, current.final)
            self._release(lambda held: held.countdown <= 0)

    def flush(self, include_late: bool = True) -> None:
        """Publish the open file now; with ``include_late`` also every held-back (late) file."""
        with self.lock:
            self.roll()
            if include_late:
                self._release(lambda held: True)

    def _release(self, due) -> None:  # type: ignore[no-untyped-def]
        ready = [h for h in self._held if due(h)]
        self._held = [h for h in self._held if not due(h)]
        for held in ready:
            self._publish(held.temp, held.final)

    def _publish(self, temp: Path, final: Path) -> None:
        os.replace(temp, final)
        self.published.append(final)
        if self.faults.duplicate_file_fraction and self.rng.random() < self.faults.duplicate_file_fraction:
            duplicate = final.with_name(final.stem + "-dup.jsonl")
            staging = final.with_name("_" + duplicate.name)
            with final.open("rb") as source, open_private(staging) as copy:
                shutil.copyfileobj(source, copy)
            os.replace(staging, duplicate)
            self.published.append(duplicate)
            log.info("landing fault: published %s twice", final.name)

    def close(self) -> None:
        self.flush(include_late=True)
