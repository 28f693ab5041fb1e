"""The org's durable state: one SQLite table per object, a logical commit clock, and commit listeners.

Why this shape:

- **One writer at a time.** Every transaction holds ``Store.lock`` from the moment it draws its commit
  timestamp until its listeners (the CDC publisher) have seen it. Commit order, timestamp order and event
  order are therefore the same order, which the replication relies on.
- **A clock as a real org keeps it.** Commit timestamps are wall-clock milliseconds (never behind the newest one,
  persisted across restarts), so transactions committed within one millisecond share a ``commitTimestamp`` and
  ``SystemModstamp``, as a bulk load stamps thousands of records alike; ``commitNumber`` (one per transaction,
  sequential) orders them. Salesforce documents no uniqueness of either timestamp (SOAP API "System Fields",
  Change Data Capture "ChangeEventHeader Fields"), and it stamps a transaction before it commits (SOAP API
  "GetUpdatedResult": ``latestDateCovered`` covers changes that started before and committed after), so rows
  may become visible behind newer ones: ``skew_next_commits`` makes such late commits on request.
- **Per record, never back.** A record's ``SystemModstamp`` is the commit timestamp of its last change and
  strictly increases: a transaction that changes a record stamped at or after its own timestamp is stamped 1 ms
  after that record when it commits (``Transaction.restamp``). Salesforce documents no case of a record's
  SystemModstamp moving back, and replication relies on it: "apply events newer than the fetched
  SystemModstamp" is exact per record, and events of one record never share a timestamp.
- **WAL mode.** Bulk query jobs read through their own connection and see a consistent snapshot while the API
  keeps writing.
- **Per-transaction states, on request** (``keep_states=True``): each commit also stores, in the same SQLite
  transaction, the state of every record its change events name *after* it (``_record_states``: entity, record,
  commit number, transaction key, commit timestamp, the record as ``snapshot`` shows it, or null once purged).
  ``record_states`` reads them: what a history table of the org must hold, transaction by transaction. Off by
  default (one more row per record changed).
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from salesforce_emulator import ids
from salesforce_emulator.changes import CommittedTransaction, Transaction, resolve_object
from salesforce_emulator.org_setup import ADMIN_USER_NUMBER, SETUP_OBJECTS, OrgSetup
from salesforce_emulator.schema import (
    NAME_ORDERS,
    Related,
    SObject,
    derived_value,
    get_object,
    org_objects,
    register_custom_objects,
)

log = logging.getLogger(__name__)

DEFAULT_ORIGIN = "com/salesforce/api/emulator"
COMMIT_NUMBER_START = 10_000_000_000
_SQL_TYPES = {"boolean": "INTEGER", "int": "INTEGER", "double": "REAL", "currency": "REAL", "percent": "REAL"}

Listener = Callable[[CommittedTransaction], None]


def quote(name: str) -> str:
    return f'"{name}"'


class Store:
    """A SQLite-backed org. Thread-safe; all writes go through :meth:`transaction`."""

    def __init__(
        self,
        path: Path,
        name_order: str = "western",
        keep_states: bool = False,
        custom_objects: int = 0,
        person_accounts: bool | None = None,
    ):
        if name_order not in NAME_ORDERS:
            raise ValueError(f"name_order {name_order!r}: use one of {', '.join(NAME_ORDERS)}")
        self.name_order = name_order  # how a person account's Name joins its parts (schema.NAME_ORDERS)
        self.keep_states = keep_states  # store each record's state after each transaction (record_states)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.row_factory = sqlite3.Row
        self._listeners: list[Listener] = []
        self._active: Transaction | None = None
        self.conn.execute("CREATE TABLE IF NOT EXISTS _meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        self._meta: dict[str, int] = dict(self.conn.execute("SELECT key, value FROM _meta").fetchall())
        # Generated custom objects (custom_objects.py): an org built with N keeps them across restarts.
        custom_count = max(custom_objects, self._meta.get("custom_objects", 0))
        self.person_accounts = self._org_kind(person_accounts)
        self.objects: list[SObject] = [
            *org_objects(self.person_accounts),
            *register_custom_objects(custom_count),
            *SETUP_OBJECTS,
        ]
        self.by_name: dict[str, SObject] = {o.name: o for o in self.objects}
        self._by_lower = {o.name.lower(): o for o in self.objects}
        if custom_count != self._meta.get("custom_objects", 0):
            self._meta["custom_objects"] = custom_count
            self.conn.execute("INSERT OR REPLACE INTO _meta (key, value) VALUES ('custom_objects', ?)", (custom_count,))
        self._create_tables()
        # Custom fields and field-level security (org_setup.py): the schema as the org's admin changed it.
        self.setup = OrgSetup(self)
        self.setup.load()
        self._listeners.append(self.setup.listener)
        self._dirty_meta: set[str] = set()
        self._last_ts = self._meta.get("last_commit_ts", 0)
        self._skews: deque[int] = deque()  # commit-time offsets of the next transactions (see skew_next_commits)
        self.default_user_id = ids.make_id("005", 1)
        if self.get_row("User", self.default_user_id) is None:
            with self.transaction(user_id=self.default_user_id) as txn:
                txn.create(
                    "User",
                    {
                        "FirstName": "Integration",
                        "LastName": "User",
                        "Username": "integration@emulator.local",
                        "Email": "integration@emulator.local",
                    },
                )
        # The admin who changes the org's schema and permissions (a user distinct from the integration user).
        self.admin_user_id = ids.make_id("005", ADMIN_USER_NUMBER)
        if self.get_row("User", self.admin_user_id) is None:
            with self.transaction(user_id=self.admin_user_id) as txn:
                txn.create(
                    "User",
                    {
                        "FirstName": "Admin",
                        "LastName": "User",
                        "Username": "admin@emulator.local",
                        "Email": "admin@emulator.local",
                    },
                )

    # -- schema -------------------------------------------------------------------------------------
    def _org_kind(self, person_accounts: bool | None) -> bool:
        """Whether this org has Person Accounts: as it was built (a new org: `person_accounts`, by default yes).
        The kind is kept across restarts; asking an org for the other kind is an error, not a silent change."""
        built = self._meta.get("person_accounts")
        if built is None:
            kind = True if person_accounts is None else person_accounts
            self._meta["person_accounts"] = int(kind)
            self.conn.execute("INSERT OR REPLACE INTO _meta (key, value) VALUES ('person_accounts', ?)", (int(kind),))
            return kind
        if person_accounts is not None and person_accounts != bool(built):
            have = "with" if built else "without"
            raise ValueError(
                f"the org in {self.path} was built {have} person accounts; open it with person_accounts="
                f"{bool(built)} (or None), or build a new org in another data directory"
            )
        return bool(built)

    def find(self, name: str) -> SObject | None:
        """This org's object `name` (case-insensitive), or another object the emulator serves (a big table)."""
        return self._by_lower.get(name.lower()) or get_object(name)

    def resolve(self, name: str) -> SObject:
        """This org's object `name`, or Salesforce's NOT_FOUND error."""
        return resolve_object(name, self.find)

    def view(self, name: str, user_id: str | None = None) -> SObject | None:
        """The object `name` as `user_id` (default: the integration user) sees it: without the fields field-level
        security hides from them (org_setup.py). What describe(), SOQL, REST and Bulk serve that user."""
        obj = self.find(name)
        return None if obj is None else self.setup.view(obj, user_id or self.default_user_id)

    def replace_object(self, obj: SObject) -> None:
        """Serve a new definition of one of the org's objects (a custom field added, changed or deleted)."""
        with self.lock:
            index = next(i for i, o in enumerate(self.objects) if o.name == obj.name)
            self.objects[index] = obj
            self.by_name[obj.name] = obj
            self._by_lower[obj.name.lower()] = obj

    def _create_tables(self) -> None:
        with self.lock:
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS _record_states (entity TEXT NOT NULL, record_id TEXT NOT NULL, "
                "commit_number INTEGER NOT NULL, transaction_key TEXT NOT NULL, commit_ts INTEGER NOT "
                "NULL, state TEXT, PRIMARY KEY (entity, record_id, commit_number))"
            )
            for obj in self.objects:
                cols = ", ".join(
                    f"{quote(f.name)} {_SQL_TYPES.get(f.type, 'TEXT')}" + (" PRIMARY KEY" if f.name == "Id" else "")
                    for f in obj.stored_fields
                )
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(obj.name)} ({cols})")
                for col in ("SystemModstamp", "LastModifiedDate"):
                    self.conn.execute(
                        f"CREATE INDEX IF NOT EXISTS {quote(f'{obj.name}_{col}')} ON {quote(obj.name)} ({quote(col)})"
                    )

    # -- transactions -------------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def _tick(self) -> int:
        if self._skews:
            return self._last_ts + self._skews.popleft()  # the clock itself does not move
        self._last_ts = max(int(time.time() * 1000), self._last_ts)
        return self._last_ts

    def skew_next_commits(self, offsets_ms: list[int]) -> None:
        """The next ``len(offsets_ms)`` transactions commit at the newest commit timestamp plus their offset (<= 0):
        ``0`` shares the timestamp of the transaction before (a same-SystemModstamp burst), ``-N`` commits N ms in
        the past (a late commit: its rows appear behind newer ones). Neither moves a record's own SystemModstamp
        back: a transaction that changes a record stamped at or after its timestamp commits 1 ms after it."""
        if any(o > 0 for o in offsets_ms):
            raise ValueError("commit offsets must be <= 0 (the clock only moves forward by itself)")
        with self.lock:
            self._skews.extend(offsets_ms)

    @contextmanager
    def transaction(self, user_id: str | None = None, origin: str = DEFAULT_ORIGIN) -> Iterator[Transaction]:
        """Open a transaction (or join the one this thread already has open, e.g. inside a composite call)."""
        with self.lock:
            if self._active is not None:
                yield self._active
                return
            commit_ts = self._tick()
            self.conn.execute("BEGIN IMMEDIATE")
            txn = Transaction(self, self.conn, commit_ts, user_id or self.default_user_id, origin)
            self._active = txn
            try:
                yield txn
            except BaseException:  # roll the transaction back, then let the error propagate
                self._active = None
                self.conn.execute("ROLLBACK")
                raise
            self._active = None
            self._commit(txn)

    def _commit(self, txn: Transaction) -> None:
        if txn.floor_ms >= txn.commit_ts:  # it changed a record stamped at or after it: never move that one back
            txn.restamp(txn.floor_ms + 1)
        self._last_ts = max(self._last_ts, txn.commit_ts)
        commit_number = self._bump("commit_number", 1, start=COMMIT_NUMBER_START)
        first_replay = self._bump("replay_id", len(txn.changes)) - len(txn.changes) + 1
        for offset, change in enumerate(txn.changes):
            change.replay_id = first_replay + offset
        self._set_meta("last_commit_ts", self._last_ts)
        self.conn.executemany(
            "INSERT INTO _meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(key, self._meta[key]) for key in self._dirty_meta],
        )
        self._dirty_meta.clear()
        key = str(uuid.uuid4())
        if self.keep_states:
            self._store_states(txn, key, commit_number)
        self.conn.execute("COMMIT")
        committed = CommittedTransaction(
            key=key,
            commit_ts=txn.commit_ts,
            commit_number=commit_number,
            user_id=txn.user_id,
            origin=txn.origin,
            changes=txn.changes,
            objects=self.by_name,
        )
        for listener in self._listeners:
            listener(committed)

    def _store_states(self, txn: Transaction, key: str, commit_number: int) -> None:
        """The state after `txn` of every record its changes name (inside its SQLite transaction)."""
        rows = []
        for entity, record_id in dict.fromkeys((c.entity, r) for c in txn.changes for r in c.record_ids):
            obj = self.resolve(entity)
            row = self.conn.execute(f"SELECT * FROM {quote(obj.name)} WHERE Id = ?", (record_id,)).fetchone()
            state = json.dumps(public_row(obj, dict(row), self.related), default=str) if row is not None else None
            rows.append((obj.name, record_id, commit_number, key, txn.commit_ts, state))
        self.conn.executemany("INSERT OR REPLACE INTO _record_states VALUES (?, ?, ?, ?, ?, ?)", rows)

    def record_states(self, object_name: str) -> list[dict[str, Any]]:
        """Every stored state of the object's records (``keep_states``), by record then commit order: ``Id``,
        ``commit_number``, ``transaction_key``, ``commit_ts`` (epoch ms) and ``state`` (None: purged)."""
        obj = self.resolve(object_name)
        rows = self.select(
            "SELECT record_id, commit_number, transaction_key, commit_ts, state FROM _record_states "
            "WHERE entity = ? ORDER BY record_id, commit_number",
            (obj.name,),
        )
        return [
            {
                "Id": r["record_id"],
                "commit_number": r["commit_number"],
                "transaction_key": r["transaction_key"],
                "commit_ts": r["commit_ts"],
                "state": json.loads(r["state"]) if r["state"] else None,
            }
            for r in rows
        ]

    def _set_meta(self, key: str, value: int) -> None:
        self._meta[key] = value
        self._dirty_meta.add(key)

    def _bump(self, key: str, by: int, start: int = 0) -> int:
        self._set_meta(key, self._meta.get(key, start) + by)
        return self._meta[key]

    def next_sequence(self, object_name: str) -> int:
        return self._bump(f"seq:{object_name}", 1)

    # -- row access (callers hold the lock through a transaction, or take it here) -------------------
    def get_row(self, object_name: str, record_id: str) -> dict[str, Any] | None:
        with self.lock:
            row = self.conn.execute(f"SELECT * FROM {quote(object_name)} WHERE Id = ?", (record_id,)).fetchone()
        return dict(row) if row is not None else None

    def insert_row(self, obj: SObject, row: dict[str, Any]) -> None:
        names = [f.name for f in obj.stored_fields]
        sql = f"INSERT INTO {quote(obj.name)} ({', '.join(map(quote, names))}) VALUES ({', '.join('?' * len(names))})"
        self.conn.execute(sql, [row.get(n) for n in names])

    def update_row(self, obj: SObject, record_id: str, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{quote(k)} = ?" for k in values)
        self.conn.execute(f"UPDATE {quote(obj.name)} SET {assignments} WHERE Id = ?", [*values.values(), record_id])

    def delete_row(self, obj: SObject, record_id: str) -> None:
        self.conn.execute(f"DELETE FROM {quote(obj.name)} WHERE Id = ?", (record_id,))

    def select(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(r) for r in self.conn.execute(sql, params).fetchall()]

    def open_reader(self) -> sqlite3.Connection:
        """A separate read-only connection: one SELECT over it is a consistent snapshot (WAL)."""
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        return conn

    # -- direct, non-HTTP views for tests and tools -------------------------------------------------
    def snapshot(self, object_name: str) -> list[dict[str, Any]]:
        """Every row of the object, deleted ones included, with IsDeleted, SystemModstamp and formula values;
        booleans as bool, datetimes as ``2025-11-22T08:26:40.000Z``. Ordered by Id."""
        obj = self.resolve(object_name)
        rows = self.select(f"SELECT * FROM {quote(obj.name)} ORDER BY Id")
        return [public_row(obj, row, self.related) for row in rows]

    def related(self, object_name: str, record_id: str | None) -> dict[str, Any] | None:
        """The live stored row a cross-object formula reads (schema.Related): None without an id, or when deleted."""
        return live_row(self.get_row(object_name, record_id) if record_id else None)

    def describe(self, object_name: str, api_version: str = "59.0", user_id: str | None = None) -> dict[str, Any]:
        """describe() of the object as `user_id` (default: the integration user) may read it."""
        obj = resolve_object(object_name, lambda name: self.view(name, user_id))
        described = obj.describe()
        described["urls"] = {
            "sobject": f"/services/data/v{api_version}/sobjects/{obj.name}",
            "describe": f"/services/data/v{api_version}/sobjects/{obj.name}/describe",
        }
        return described

    def count(self, object_name: str, include_deleted: bool = False) -> int:
        obj = self.resolve(object_name)
        where = "" if include_deleted else " WHERE IsDeleted = 0"
        return self.select(f"SELECT COUNT(*) AS n FROM {quote(obj.name)}{where}")[0]["n"]

    def ids(self, object_name: str, include_deleted: bool = False) -> list[str]:
        obj = self.resolve(object_name)
        where = "" if include_deleted else " WHERE IsDeleted = 0"
        return [r["Id"] for r in self.select(f"SELECT Id FROM {quote(obj.name)}{where} ORDER BY Id")]

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def live_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return row if row is not None and not row.get("IsDeleted") else None


def reader_related(conn: sqlite3.Connection, cache_size: int = 65536) -> Related:
    """`Store.related` over a reader connection (a Bulk job's snapshot), each record looked up once per job."""

    @functools.lru_cache(maxsize=cache_size)
    def related(object_name: str, record_id: str | None) -> dict[str, Any] | None:
        if not record_id:
            return None
        found = conn.execute(f"SELECT * FROM {quote(object_name)} WHERE Id = ?", (record_id,)).fetchone()
        return live_row(dict(found) if found is not None else None)

    return related


def public_row(obj: SObject, row: dict[str, Any], related: Related) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fld in obj.fields:
        if fld.parent:
            continue
        value = derived_value(obj, fld, row, related) if fld.calculated else row.get(fld.name)
        out[fld.name] = bool(value) if fld.type == "boolean" and value is not None else value
    return out
