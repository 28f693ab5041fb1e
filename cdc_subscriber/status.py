"""Stream status, in the states of Google Datastream: what the subscriber reports and Dagster observes.

``NOT_STARTED`` (never ran), ``STARTING`` (connecting / logging in), ``RUNNING`` (streaming), ``DRAINING`` (stopping:
landing what it holds), ``PAUSED`` (stopped on request), ``FAILED`` (an error; retrying with backoff),
``FAILED_PERMANENTLY`` (an error retrying cannot fix: bad topic, no permission, bad configuration).

Each stream (topic) writes ``status-<topic>.json`` in the subscriber's state folder (by default
``<landing zone>-subscriber``, beside the zone and never inside it: shared/subscriber_state.py ``state_dir_for``): state, last landed
replay id (hex of the opaque bytes, and its long form when it is 8 bytes), events landed, dead letters (unique
events that could not be landed, ``dead_letters.py``) and the last one's reason, events per second (over the last
``RATE_WINDOW`` seconds), lag, last error and its time, and ``updated_at``. Lag is now minus the newest
``commitTimestamp`` received, or 0 when the server's keepalive says nothing newer exists (an idle org is not a
lagging stream). A status whose ``updated_at`` is older than ``STALE_AFTER_SECONDS`` (shared/subscriber_state.py, where readers read it) comes from a subscriber that
is no longer running, and reads as FAILED.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path

from cdc_subscriber.position import state_file
from cdc_subscriber.proto import replay_as_long
from resources.storage import Folder
from shared.subscriber_state import StreamStatus, now_iso

log = logging.getLogger(__name__)

RATE_WINDOW = 10.0
WRITE_EVERY = 1.0


class StatusReporter:
    """Keeps one stream's status and writes it (atomically) at most every ``WRITE_EVERY`` seconds, and at once
    on a state change or an error."""

    def __init__(self, state_dir: str | Path, topic: str, slug: str):
        self.folder, self.name = Folder(state_dir), f"status-{slug}.json"
        self.path = state_file(state_dir, self.name)
        self.status = StreamStatus(topic=topic)
        self.lock = threading.Lock()
        self._landed: collections.deque[tuple[float, int]] = collections.deque()
        self._written = 0.0

    def set_state(self, state: str, error: BaseException | str | None = None) -> None:
        with self.lock:
            self.status.state = state
            if error is not None:
                self.status.last_error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
                self.status.last_error_at = now_iso()
        self.write(force=True)

    def received(self, commit_ts: int) -> None:
        with self.lock:
            newest = max(self.status.newest_commit_ts or 0, commit_ts)
            self.status.newest_commit_ts = newest
            self.status.lag_seconds = max(0.0, time.time() - newest / 1000)

    def caught_up(self) -> None:
        with self.lock:
            self.status.lag_seconds = 0.0

    def restored(self, replay_id: bytes | None, dead_letters: int) -> None:
        """At start: the saved position and the dead letters recorded before."""
        with self.lock:
            self._position(replay_id)
            self.status.dead_letters = dead_letters

    def moved_to(self, replay_id: bytes) -> None:
        """A keepalive moved the position with nothing to land."""
        with self.lock:
            self._position(replay_id)

    def _position(self, replay_id: bytes | None) -> None:
        if replay_id is not None:
            self.status.last_replay_id = replay_as_long(replay_id)
            self.status.last_replay_id_hex = replay_id.hex()

    def landed(self, events: int, replay_id: bytes | None) -> None:
        with self.lock:
            self.status.events_landed += events
            self.status.files_landed += 1
            self._position(replay_id)
            self._landed.append((time.monotonic(), events))
        self.write()

    def dead_lettered(self, reason: str, new: bool) -> None:
        with self.lock:
            self.status.dead_letters += new
            self.status.last_dead_letter = reason
            self.status.last_dead_letter_at = now_iso()
        self.write(force=True)

    def resynced(self) -> None:
        with self.lock:
            self.status.resyncs += 1

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._written < WRITE_EVERY:
            return
        with self.lock:
            while self._landed and now - self._landed[0][0] > RATE_WINDOW:
                self._landed.popleft()
            self.status.events_per_second = round(sum(n for _, n in self._landed) / RATE_WINDOW, 1)
            if self.status.lag_seconds and self.status.newest_commit_ts and self.status.state == "RUNNING":
                self.status.lag_seconds = round(max(0.0, time.time() - self.status.newest_commit_ts / 1000), 3)
            self.status.updated_at = now_iso()
            self._written = now
            self.folder.write_atomically(self.name, json.dumps(asdict(self.status)), durable=False)
