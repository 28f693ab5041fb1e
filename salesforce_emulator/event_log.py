"""The org's event bus: every published change event kept with its replay id, for the Pub/Sub API server.

The CDC publisher appends each transaction's events (the same CometD lines it writes to the landing zone) inside
the store's commit, so the log is in replay order, which is commit order. It lives in its own SQLite file
(``events.sqlite``) so a restarted emulator still serves what it published before.

Retention works like Salesforce's 72 hours: events older than ``retention_seconds`` are purged, and
``purged_through`` remembers the newest replay id gone. Subscribing after a replay id below it is an error (the
events right after it are lost), as is a replay id the bus never issued. ``expire_through`` purges by replay id,
for tests that cannot wait three days.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RETENTION_SECONDS = 72 * 3600
_PURGE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class LoggedEvent:
    replay_id: int
    entity: str
    line: str  # the CometD JSON event


class EventLog:
    def __init__(self, path: Path, retention_seconds: float = DEFAULT_RETENTION_SECONDS):
        self.path = Path(path)
        self.retention_seconds = retention_seconds
        self.changed = threading.Condition()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS events (replay_id INTEGER PRIMARY KEY, entity TEXT NOT NULL, "
            "commit_ts INTEGER NOT NULL, line TEXT NOT NULL)"
        )
        self._conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        self._lock = threading.Lock()
        meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        self.purged_through: int = meta.get("purged_through", 0)
        self.tip: int = self._conn.execute("SELECT coalesce(max(replay_id), 0) FROM events").fetchone()[0]
        self.tip = max(self.tip, meta.get("tip", 0))
        self._last_purge = 0.0

    # -- writing (inside the store's commit) ------------------------------------------------------------
    def append(self, lines: list[str], commit_ts: int) -> None:
        if not lines:
            return
        rows = []
        for line in lines:
            event = json.loads(line)
            header = event["data"]["payload"]["ChangeEventHeader"]
            rows.append((event["data"]["event"]["replayId"], header["entityName"], commit_ts, line))
        with self._lock:
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?)", rows)
            newest = max(r[0] for r in rows)
            self._conn.execute(
                "INSERT INTO meta VALUES ('tip', ?) ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
                (newest,),
            )
            self._conn.execute("COMMIT")
        with self.changed:
            self.tip = max(self.tip, newest)
            self.changed.notify_all()
        if time.monotonic() - self._last_purge > _PURGE_EVERY_SECONDS:
            self.purge_older_than(int(time.time() * 1000 - self.retention_seconds * 1000))

    # -- retention ----------------------------------------------------------------------------------------
    def purge_older_than(self, commit_ts: int) -> None:
        self._last_purge = time.monotonic()
        with self._lock:
            newest = self._conn.execute(
                "SELECT max(replay_id) FROM events WHERE commit_ts < ?", (commit_ts,)
            ).fetchone()[0]
        if newest is not None:
            self.expire_through(newest)

    def expire_through(self, replay_id: int) -> None:
        """Forget every event up to ``replay_id`` (as if it had passed the retention window)."""
        with self._lock:
            self._conn.execute("BEGIN")
            self._conn.execute("DELETE FROM events WHERE replay_id <= ?", (replay_id,))
            self.purged_through = max(self.purged_through, replay_id)
            self._conn.execute(
                "INSERT INTO meta VALUES ('purged_through', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (self.purged_through,),
            )
            self._conn.execute("COMMIT")

    # -- reading ------------------------------------------------------------------------------------------
    def earliest(self) -> int:
        """The position before the oldest retained event (EARLIEST starts after it)."""
        return self.purged_through

    def read(self, after: int, through: int, entities: set[str] | None, limit: int) -> list[LoggedEvent]:
        """Events with ``after < replay_id <= through`` (of ``entities``, or all), oldest first."""
        sql = "SELECT replay_id, entity, line FROM events WHERE replay_id > ? AND replay_id <= ?"
        params: list[object] = [after, through]
        if entities is not None:
            sql += f" AND entity IN ({', '.join('?' * len(entities))})"
            params += sorted(entities)
        sql += " ORDER BY replay_id LIMIT ?"
        with self._lock:
            rows = self._conn.execute(sql, [*params, limit]).fetchall()
        return [LoggedEvent(*row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
