"""One database transaction of the org, and the changes it records for Change Data Capture.

A :class:`Transaction` is opened by :meth:`Store.transaction` with the store lock held and a commit timestamp
already drawn from the clock: every row it touches gets that timestamp as ``SystemModstamp`` (and as
``LastModifiedDate`` on create/update/undelete). A record's ``SystemModstamp`` never moves back: should a
transaction stamped earlier (a late commit, or a burst sharing one millisecond) change a record stamped at or after
its timestamp, the whole transaction is stamped 1 ms after that record's stamp when it commits (``restamp``), as a
row lock makes a real transaction wait for the one holding the record. Each operation appends a :class:`Change`, the unit the CDC
publisher turns into one event. An update applied to several records with the same resulting field changes is
one Change naming all of them, as Salesforce does; deletes in one call are one Change as well.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from salesforce_emulator import ids
from salesforce_emulator.errors import ApiError, invalid_field, not_found
from salesforce_emulator.schema import OBJECTS, READ_ONLY, SObject, get_object
from salesforce_emulator.values import InvalidFieldValue, iso_to_ms, ms_to_iso, to_storage

if TYPE_CHECKING:
    from salesforce_emulator.store import Store

EVENT_EXCLUDED = {"Id", "IsDeleted", "SystemModstamp"}


@dataclass
class Change:
    entity: str
    change_type: str  # CREATE | UPDATE | DELETE | UNDELETE
    record_ids: list[str]
    values: dict[str, Any] = field(default_factory=dict)  # storage form; UPDATE: changed fields only
    nulled: list[str] = field(default_factory=list)
    replay_id: int = 0
    # UPDATE: the values long text fields had before, per record (CDC may send such a field as a diff).
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class CommittedTransaction:
    key: str
    commit_ts: int
    commit_number: int
    user_id: str
    origin: str
    changes: list[Change]
    # The org's objects by name, as they were when it committed (an org without person accounts has an Account of
    # its own): what its change events are built from.
    objects: Mapping[str, SObject] = field(default_factory=lambda: OBJECTS)


def resolve_object(name: str, find: Callable[[str], SObject | None] = get_object) -> SObject:
    """The object `name` (case-insensitive) as `find` knows it, or Salesforce's NOT_FOUND error."""
    obj = find(name)
    if obj is None:
        raise ApiError(
            404, "NOT_FOUND", f"The requested resource does not exist: sObject type '{name}' is not supported."
        )
    return obj


def normalize_id(record_id: str) -> str:
    if not isinstance(record_id, str) or len(record_id) not in (15, 18) or not record_id.isalnum():
        raise ApiError(400, "MALFORMED_ID", f"Malformed Id: {record_id!r}", ["Id"])
    return ids.to_18(record_id)


def normalize_values(obj: SObject, values: dict[str, Any]) -> dict[str, Any]:
    """API input to storage form, with Salesforce's errors for unknown, read-only or ill-typed fields."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name == "attributes":
            continue
        fld = obj.field(name)
        if fld is None:
            raise invalid_field(f"No such column '{name}' on sobject of type {obj.name}", [name])
        if not fld.createable or fld.name in READ_ONLY:
            raise ApiError(
                400,
                "INVALID_FIELD_FOR_INSERT_UPDATE",
                f"Unable to create/update fields: {fld.name}. Please check the security settings of "
                "this field and verify that it is read/write for your profile or permission set.",
                [fld.name],
            )
        try:
            stored = to_storage(fld.type, value, fld.name)
        except InvalidFieldValue as exc:
            raise ApiError(400, "JSON_PARSER_ERROR", str(exc), [fld.name]) from exc
        if fld.type in ("reference", "id") and stored is not None:
            stored = normalize_id(stored)
        if isinstance(stored, str) and fld.length and len(stored) > fld.length:
            raise ApiError(
                400, "STRING_TOO_LONG", f"{fld.name}: data value too large (max length={fld.length})", [fld.name]
            )
        out[fld.name] = stored
    return out


class Transaction:
    """Operations inside one commit. Obtain it from ``Store.transaction()``; never construct directly."""

    def __init__(self, store: Store, conn: sqlite3.Connection, commit_ts: int, user_id: str, origin: str):
        self.store = store
        self.conn = conn
        self.commit_ts = commit_ts
        self.stamp = ms_to_iso(commit_ts)
        self.user_id = user_id
        self.origin = origin
        self.changes: list[Change] = []
        self.touched: dict[tuple[str, str], tuple[SObject, set[str]]] = {}  # record -> the stamp fields we set
        self.floor_ms = 0  # the newest SystemModstamp (ms) among the existing records it changes

    def _touch(self, obj: SObject, row: dict[str, Any], fields: tuple[str, ...]) -> None:
        """Remember a record this transaction stamps (and which stamp fields), and the stamp it had before: the
        commit may not go below it. A record stamped earlier in this transaction carries our own stamp."""
        key = (obj.name, row["Id"])
        if key not in self.touched and row.get("SystemModstamp"):
            self.floor_ms = max(self.floor_ms, iso_to_ms(row["SystemModstamp"]))
        self.touched.setdefault(key, (obj, set()))[1].update(fields)

    def restamp(self, commit_ts: int) -> None:
        """Move this transaction to ``commit_ts``: the stamp fields it set on rows, and in its change values."""
        new = ms_to_iso(commit_ts)
        for (_, record_id), (obj, fields) in self.touched.items():
            if self.store.get_row(obj.name, record_id) is not None:  # None: purged later in this transaction
                self.store.update_row(obj, record_id, dict.fromkeys(sorted(fields), new))
        for change in self.changes:
            stamped = {"CREATE": ("CreatedDate", "LastModifiedDate")}.get(change.change_type, ("LastModifiedDate",))
            for key in stamped:
                if change.values.get(key) == self.stamp:
                    change.values[key] = new
        self.commit_ts, self.stamp = commit_ts, new

    # -- reads inside the transaction ---------------------------------------------------------------
    def get(self, entity: str, record_id: str) -> dict[str, Any] | None:
        return self.store.get_row(entity, record_id)

    def _live_row(self, obj: SObject, record_id: str) -> dict[str, Any]:
        row = self.store.get_row(obj.name, normalize_id(record_id))
        if row is None:
            raise not_found(f"Provided external ID field does not exist or is not accessible: {record_id}")
        if row["IsDeleted"]:
            raise ApiError(404, "ENTITY_IS_DELETED", f"entity is deleted: {record_id}")
        return row

    # -- writes -------------------------------------------------------------------------------------
    def create(self, entity: str, values: dict[str, Any]) -> str:
        obj = self.store.resolve(entity)
        given = normalize_values(obj, values)
        sequence = self.store.next_sequence(obj.name)
        record_id = ids.make_id(obj.key_prefix, sequence)
        row: dict[str, Any] = {f.name: f.default for f in obj.stored_fields}
        row.update({k: v for k, v in given.items() if v is not None})
        row.update(obj.derived(row, self.store.name_order) if obj.derived else {})
        if "OwnerId" in row and row["OwnerId"] is None:
            row["OwnerId"] = self.user_id
        if obj.name == "Case":
            row["CaseNumber"] = f"{sequence:08d}"
        row.update(
            Id=record_id,
            IsDeleted=0,
            CreatedDate=self.stamp,
            CreatedById=self.user_id,
            LastModifiedDate=self.stamp,
            LastModifiedById=self.user_id,
            SystemModstamp=self.stamp,
        )
        missing = [f.name for f in obj.stored_fields if not f.nillable and row.get(f.name) is None]
        if missing:
            raise ApiError(
                400, "REQUIRED_FIELD_MISSING", f"Required fields are missing: [{', '.join(missing)}]", missing
            )
        self.store.insert_row(obj, row)
        self._touch(obj, {"Id": record_id}, ("CreatedDate", "LastModifiedDate", "SystemModstamp"))
        event_values = {k: v for k, v in row.items() if v is not None and k not in EVENT_EXCLUDED}
        self.changes.append(Change(obj.name, "CREATE", [record_id], event_values))
        return record_id

    def update(self, entity: str, record_id: str, values: dict[str, Any]) -> None:
        self.update_many(entity, [record_id], values)

    def update_many(self, entity: str, record_ids: list[str], values: dict[str, Any]) -> None:
        """Apply the same field values to several records; consecutive records whose resulting change is
        identical share one event (Salesforce merges them into one event naming several recordIds)."""
        obj = self.store.resolve(entity)
        given = normalize_values(obj, values)
        for record_id in record_ids:
            row = self._live_row(obj, record_id)
            self._touch(obj, row, ("LastModifiedDate", "SystemModstamp"))
            wanted = {**given, **(obj.derived({**row, **given}, self.store.name_order) if obj.derived else {})}
            diff = {k: v for k, v in wanted.items() if row[k] != v}
            audit = {"LastModifiedDate": self.stamp, "SystemModstamp": self.stamp}
            if row["LastModifiedById"] != self.user_id:
                audit["LastModifiedById"] = self.user_id
            self.store.update_row(obj, row["Id"], {**diff, **audit})
            event_values = {**diff, "LastModifiedDate": self.stamp}
            if "LastModifiedById" in audit:
                event_values["LastModifiedById"] = self.user_id
            previous = {k: row[k] for k in diff if obj.field(k).type == "textarea" and not obj.field(k).compound}
            nulled = [k for k, v in diff.items() if v is None]
            self._record(
                Change(
                    obj.name,
                    "UPDATE",
                    [row["Id"]],
                    event_values,
                    nulled,
                    previous={row["Id"]: previous} if previous else {},
                )
            )

    def _record(self, change: Change) -> None:
        """Append a change, merging it into the previous one when it is the same change to another record
        (consecutive only, so event order never differs from the order the changes were made)."""
        last = self.changes[-1] if self.changes else None
        if (
            last is not None
            and change.change_type in ("UPDATE", "DELETE")
            and last.entity == change.entity
            and last.change_type == change.change_type
            and last.values == change.values
            and not set(change.record_ids) & set(last.record_ids)
        ):
            last.record_ids.extend(change.record_ids)
            last.previous.update(change.previous)
        else:
            self.changes.append(change)

    def delete(self, entity: str, record_ids: list[str]) -> None:
        obj = self.store.resolve(entity)
        if not obj.deletable:
            raise ApiError(400, "DELETE_FAILED", f"{obj.name} records cannot be deleted")
        for record_id in record_ids:
            row = self._live_row(obj, record_id)
            self._touch(obj, row, ("SystemModstamp",))
            self.store.update_row(obj, row["Id"], {"IsDeleted": 1, "SystemModstamp": self.stamp})
            self._record(Change(obj.name, "DELETE", [row["Id"]]))

    def undelete(self, entity: str, record_ids: list[str]) -> None:
        obj = self.store.resolve(entity)
        for record_id in record_ids:
            row = self.store.get_row(obj.name, normalize_id(record_id))
            if row is None:
                raise not_found(f"entity not found in the recycle bin: {record_id}")
            if not row["IsDeleted"]:
                raise ApiError(400, "UNDELETE_FAILED", f"Entity is not in the recycle bin: {record_id}")
            self._touch(obj, row, ("LastModifiedDate", "SystemModstamp"))
            audit = {
                "IsDeleted": 0,
                "LastModifiedDate": self.stamp,
                "LastModifiedById": self.user_id,
                "SystemModstamp": self.stamp,
            }
            self.store.update_row(obj, row["Id"], audit)
            row.update(audit)
            event_values = {k: v for k, v in row.items() if v is not None and k not in EVENT_EXCLUDED}
            self.changes.append(Change(obj.name, "UNDELETE", [row["Id"]], event_values))

    def purge(self, entity: str, record_ids: list[str]) -> None:
        """Empty the recycle bin for these records: a hard delete, which sends no change event."""
        obj = self.store.resolve(entity)
        for record_id in record_ids:
            row = self.store.get_row(obj.name, normalize_id(record_id))
            if row is None or not row["IsDeleted"]:
                raise ApiError(400, "INVALID_ID_FIELD", f"Record is not in the recycle bin: {record_id}")
            self.store.delete_row(obj, row["Id"])

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Run a part of the transaction that may fail alone (``allOrNone: false`` collections)."""
        marker = len(self.changes)
        merged = len(self.changes[-1].record_ids) if self.changes else 0
        touched = {key: (obj, set(fields)) for key, (obj, fields) in self.touched.items()}
        floor = self.floor_ms
        self.conn.execute("SAVEPOINT part")
        try:
            yield
        except BaseException:  # undo this part, then let the error propagate
            self.conn.execute("ROLLBACK TO part")
            self.conn.execute("RELEASE part")
            del self.changes[marker:]
            self.touched, self.floor_ms = touched, floor
            if marker:
                del self.changes[marker - 1].record_ids[merged:]
            raise
        self.conn.execute("RELEASE part")
