"""An org whose schema and permissions change while it runs: custom fields and field-level security.

**Custom fields** are created, changed and deleted through the Tooling API's ``CustomField`` object
(``api_tooling.py``), as an admin does it (Tooling API Developer Guide, "CustomField": ``FullName``
``Account.Foo__c`` and ``Metadata`` with the Metadata API's ``type``, ``label``, ``length``, ``precision``,
``scale``, ``valueSet``). Each change replaces the object's definition in the store (``Store.replace_object``): every
API then serves the new field list, and the object's change events carry a new schema id, which the Pub/Sub API's
GetSchema serves, as it keeps serving the ids of earlier versions (events published before the change keep theirs).
A deleted field leaves every API at once, its developer name gets ``_del`` appended (Help, "Manage Deleted Custom
Fields"), so a new field may take its name, starting with no values; the old values stay in the org's table,
unreachable (Salesforce keeps a deleted custom field's data for 15 days for an undelete, which the emulator does not
offer).

**Field-level security** (FLS): ``PermissionSet``, ``FieldPermissions`` and ``PermissionSetAssignment`` are
records, created, queried, updated and deleted through REST as in a real org (Object Reference, "FieldPermissions":
"To grant a user access to a field, associate a FieldPermissions record with a PermissionSet that's assigned to a
user"; "A FieldPermissions record must have at minimum PermissionsRead set to true, or it will be deleted";
PermissionsEdit "Requires PermissionsRead for the same field to be true"). The org has two users: the integration
user (the OAuth login's, ``Store.default_user_id``) and an admin (``Store.admin_user_id``, the session
``Emulator.admin_token``), who alone changes the schema and the permissions. What a user can read:

- the admin, every field (the System Administrator profile, given every field as Setup does for the profiles it
  is told to; kept simple: the emulator has no profile editing);
- any other user, every field the org was built with (their profile's), and a field created through the Tooling
  API only while a permission set assigned to them grants ``PermissionsRead`` on it (a field created through the
  Metadata or Tooling API is visible to no profile until granted).

Fields a user cannot read are left out of describe(), SOQL (naming one fails with ``INVALID_FIELD`` "No such column",
the same answer as for a field that does not exist), REST record reads, Bulk API 2.0 jobs, and the change events
the integration user subscribes to (Change Data Capture Developer Guide, "Field-Level Security": "Delivered events
contain only the fields that a subscribed user is allowed to view", while the event schema "includes all object
fields, even the fields that the user doesn't have access to"). Salesforce applies a permission change to Pub/Sub
subscribers "within 10 minutes"; the emulator at once.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
from typing import TYPE_CHECKING, Any

from salesforce_emulator import ids
from salesforce_emulator.errors import ApiError
from salesforce_emulator.schema import Field, SObject, audit_fields, deleted_field, id_field, register

if TYPE_CHECKING:
    from salesforce_emulator.changes import CommittedTransaction
    from salesforce_emulator.store import Store

CUSTOM_FIELD_PREFIX = "00N"  # the key prefix of CustomField ids
ADMIN_USER_NUMBER = 2  # the integration user is User 1

PERMISSION_SET = SObject(
    "PermissionSet",
    "0PS",
    (
        *id_field(),
        Field("Name", "string", nillable=False, length=80),
        Field("Label", "string", nillable=False, length=80),
        Field("Description", "textarea", length=255),
        Field("IsOwnedByProfile", "boolean", nillable=False, default=0, updateable=False),
        *audit_fields(owner=False),
    ),
    cdc=False,
    internal=deleted_field(),
)
FIELD_PERMISSIONS = SObject(
    "FieldPermissions",
    "01k",
    (
        *id_field(),
        Field("ParentId", "reference", nillable=False, length=18, reference_to=("PermissionSet",)),
        Field("SobjectType", "picklist", nillable=False, length=40),
        Field("Field", "picklist", nillable=False, length=80),
        Field("PermissionsRead", "boolean", nillable=False, default=0),
        Field("PermissionsEdit", "boolean", nillable=False, default=0),
        *audit_fields(owner=False),
    ),
    cdc=False,
    internal=deleted_field(),
)
PERMISSION_SET_ASSIGNMENT = SObject(
    "PermissionSetAssignment",
    "0Pa",
    (
        *id_field(),
        Field("AssigneeId", "reference", nillable=False, length=18, reference_to=("User",)),
        Field("PermissionSetId", "reference", nillable=False, length=18, reference_to=("PermissionSet",)),
        *audit_fields(owner=False),
    ),
    cdc=False,
    internal=deleted_field(),
)
SETUP_OBJECTS = tuple(register(o) for o in (PERMISSION_SET, FIELD_PERMISSIONS, PERMISSION_SET_ASSIGNMENT))
PERMISSION_OBJECTS = {o.name for o in SETUP_OBJECTS}

# Metadata API field types (Metadata API Developer Guide, "CustomField", FieldType) -> describe()'s type.
METADATA_TYPES = {
    "Text": "string",
    "TextArea": "textarea",
    "LongTextArea": "textarea",
    "Html": "textarea",
    "Number": "double",
    "Currency": "currency",
    "Percent": "percent",
    "Checkbox": "boolean",
    "Date": "date",
    "DateTime": "datetime",
    "Time": "time",
    "Email": "email",
    "Phone": "phone",
    "Url": "url",
    "Picklist": "picklist",
    "MultiselectPicklist": "multipicklist",
}
_FIXED_LENGTHS = {"TextArea": 255, "Email": 80, "Phone": 40, "Url": 255, "Picklist": 255, "MultiselectPicklist": 4099}
_NUMBERS = ("Number", "Currency", "Percent")
_FULL_NAME = re.compile(r"^(?P<object>\w+)\.(?P<field>[A-Za-z][A-Za-z0-9_]*__c)$")


def integrity_error(message: str, fields: list[str] | None = None) -> ApiError:
    return ApiError(400, "FIELD_INTEGRITY_EXCEPTION", message, fields)


def insufficient_access(what: str) -> ApiError:
    return ApiError(
        400,
        "INSUFFICIENT_ACCESS_OR_READONLY",
        f"insufficient access rights: {what} needs an administrator's session (Customize Application, Manage "
        "Profiles and Permission Sets); the integration user has neither",
    )


def picklist_values(metadata: dict[str, Any]) -> tuple[str, ...]:
    """A picklist's values from ``valueSet.valueSetDefinition.value[].fullName`` (the Metadata API's shape)."""
    definition = (metadata.get("valueSet") or {}).get("valueSetDefinition") or {}
    return tuple(str(v.get("fullName") or v.get("label")) for v in definition.get("value") or [])


def field_from_metadata(name: str, metadata: dict[str, Any]) -> Field:
    """A custom field from Tooling API ``Metadata``; FIELD_INTEGRITY_EXCEPTION for what the org refuses."""
    kind = metadata.get("type")
    if kind not in METADATA_TYPES:
        raise integrity_error(
            f"Metadata.type {kind!r} is not a supported field type: use one of {', '.join(METADATA_TYPES)}", ["type"]
        )
    label = metadata.get("label")
    if not label:
        raise integrity_error("Metadata.label: a custom field needs a label", ["label"])
    length, precision, scale = metadata.get("length"), metadata.get("precision"), metadata.get("scale")
    if kind == "Text" and not (isinstance(length, int) and 1 <= length <= 255):
        raise integrity_error("Length: a Text field's length must be between 1 and 255", ["length"])
    if kind in ("LongTextArea", "Html") and not (isinstance(length, int) and 256 <= length <= 131072):
        raise integrity_error("Length: a Long Text Area's length must be between 256 and 131,072", ["length"])
    if kind in _NUMBERS:
        if not (isinstance(precision, int) and 1 <= precision <= 18):
            raise integrity_error("Precision: a number's precision must be between 1 and 18", ["precision"])
        if not (isinstance(scale, int) and 0 <= scale <= precision):
            raise integrity_error("Scale: a number's scale must be between 0 and its precision", ["scale"])
    values = picklist_values(metadata)
    if kind in ("Picklist", "MultiselectPicklist") and not values:
        raise integrity_error("Metadata.valueSet: a picklist needs at least one value", ["valueSet"])
    default = metadata.get("defaultValue")
    if kind == "Checkbox":
        if default is None:
            raise integrity_error("Metadata.defaultValue: a Checkbox needs a default value (true or false)")
        default = 1 if str(default).lower() == "true" else 0
    return Field(
        name,
        METADATA_TYPES[kind],
        nillable=kind != "Checkbox",
        length=_FIXED_LENGTHS.get(kind, length if kind in ("Text", "LongTextArea", "Html") else None),
        default=default if kind == "Checkbox" else None,
        label=str(label),
        picklist=values,
        precision=precision if kind in _NUMBERS else None,
        scale=scale if kind in _NUMBERS else None,
    )


def _field_json(fld: Field) -> dict[str, Any]:
    return dataclasses.asdict(fld)


def _field_of(data: dict[str, Any]) -> Field:
    return Field(**{**data, "reference_to": tuple(data["reference_to"]), "picklist": tuple(data["picklist"])})


class OrgSetup:
    """The store's changeable schema and its field-level security (see the module docstring)."""

    def __init__(self, store: Store):
        self.store = store
        self.version = 0  # bumped by every schema or permission change: cached views are then rebuilt
        self._hidden: dict[tuple[str, str], frozenset[str]] = {}
        self._lock = threading.Lock()
        self.schemas: dict[str, SObject] = {}  # every version of every object, by schema id
        conn = store.conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _custom_fields (Id TEXT PRIMARY KEY, object TEXT NOT NULL, name TEXT NOT "
            "NULL, metadata TEXT NOT NULL, field TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0)"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _schema_versions (schema_id TEXT PRIMARY KEY, object TEXT NOT NULL, "
            "fields TEXT NOT NULL)"
        )

    # -- start-up -----------------------------------------------------------------------------------------
    def load(self) -> None:
        """Apply the custom fields the org has (a restart), and learn every schema version it served."""
        for row in self.store.select("SELECT * FROM _custom_fields WHERE deleted = 0 ORDER BY rowid"):
            obj = self.store.find(row["object"])
            if obj is not None:
                self._swap(obj, [*obj.fields, _field_of(json.loads(row["field"]))], persist=False)
        for row in self.store.select("SELECT * FROM _schema_versions"):
            base = self.store.find(row["object"])
            if base is not None and row["schema_id"] not in self.schemas:
                fields = tuple(_field_of(f) for f in json.loads(row["fields"]))
                self.schemas[row["schema_id"]] = dataclasses.replace(base, fields=fields)
        for obj in self.store.objects:
            self.schemas.setdefault(obj.schema_id, obj)

    def listener(self, txn: CommittedTransaction) -> None:
        """A store listener: a committed change to permission records changes who reads what."""
        if any(change.entity in PERMISSION_OBJECTS for change in txn.changes):
            self.invalidate()

    def invalidate(self) -> None:
        with self._lock:
            self.version += 1
            self._hidden.clear()

    # -- custom fields (Tooling API) -----------------------------------------------------------------------
    def custom_field(self, field_id: str) -> dict[str, Any]:
        rows = self.store.select("SELECT * FROM _custom_fields WHERE Id = ? AND deleted = 0", (field_id,))
        if not rows:
            raise ApiError(404, "NOT_FOUND", f"The requested resource does not exist: CustomField {field_id}")
        return rows[0]

    def create_field(self, full_name: str, metadata: dict[str, Any]) -> str:
        match = _FULL_NAME.match(full_name or "")
        if match is None:
            raise integrity_error(
                f"FullName {full_name!r}: give <Object>.<Field>__c, e.g. Account.Loyalty_Tier__c", ["FullName"]
            )
        with self.store.lock:
            obj = self.store.resolve(match["object"])
            if obj.field(match["field"]) is not None:
                raise ApiError(
                    400,
                    "DUPLICATE_DEVELOPER_NAME",
                    f"There is already a field named {match['field'][:-3]} on {obj.name}.",
                    ["DeveloperName"],
                )
            fld = field_from_metadata(match["field"], metadata)
            table = f'"{obj.name}"'
            columns = {r["name"] for r in self.store.select(f"PRAGMA table_info({table})")}
            if fld.name in columns:  # a field deleted earlier under this name: its old values are not the new field's
                self.store.conn.execute(f'UPDATE {table} SET "{fld.name}" = ?', (fld.default,))
            else:
                self.store.conn.execute(f'ALTER TABLE {table} ADD COLUMN "{fld.name}"')
                if fld.default is not None:  # a Checkbox's default is every existing record's value
                    self.store.conn.execute(f'UPDATE {table} SET "{fld.name}" = ?', (fld.default,))
            number = self.store.next_sequence("CustomField")
            self.store.conn.execute(
                "INSERT OR REPLACE INTO _meta (key, value) VALUES ('seq:CustomField', ?)", (number,)
            )
            field_id = ids.make_id(CUSTOM_FIELD_PREFIX, number)
            self.store.conn.execute(
                "INSERT INTO _custom_fields (Id, object, name, metadata, field) VALUES (?, ?, ?, ?, ?)",
                (field_id, obj.name, fld.name, json.dumps(metadata), json.dumps(_field_json(fld))),
            )
            self._swap(obj, [*obj.fields, fld])
        return field_id

    def update_field(self, field_id: str, metadata: dict[str, Any]) -> None:
        """A new type, length, precision, scale or label; stored values are converted as the org converts them."""
        with self.store.lock:
            row = self.custom_field(field_id)
            obj = self.store.resolve(row["object"])
            merged = {**json.loads(row["metadata"]), **metadata}
            fld = field_from_metadata(row["name"], merged)
            table, column = f'"{obj.name}"', f'"{fld.name}"'
            if fld.type in ("double", "currency", "percent"):
                scale = fld.scale or 0
                self.store.conn.execute(f"UPDATE {table} SET {column} = ROUND(CAST({column} AS REAL), {scale})")
            elif fld.type == "boolean":
                self.store.conn.execute(f"UPDATE {table} SET {column} = COALESCE({column}, ?)", (fld.default,))
            elif fld.length is not None:
                # Text: "Changing to Number from any other type" may lose data, to Text keeps it (Help,
                # "Considerations for Converting the Field Type of a Custom Field"): a number becomes its decimal
                # text as the org shows it (12, not 12.0), longer values are cut to the length.
                self.store.conn.execute(
                    f"UPDATE {table} SET {column} = substr(CASE WHEN typeof({column}) = 'real' AND {column} = "
                    f"CAST({column} AS INTEGER) THEN CAST(CAST({column} AS INTEGER) AS TEXT) ELSE CAST({column} AS "
                    f"TEXT) END, 1, {fld.length}) WHERE {column} IS NOT NULL"
                )
            self.store.conn.execute(
                "UPDATE _custom_fields SET metadata = ?, field = ? WHERE Id = ?",
                (json.dumps(merged), json.dumps(_field_json(fld)), field_id),
            )
            self._swap(obj, [fld if f.name == fld.name else f for f in obj.fields])

    def delete_field(self, field_id: str) -> None:
        with self.store.lock:
            row = self.custom_field(field_id)
            obj = self.store.resolve(row["object"])
            # "When deleted, ... '_del' [is] appended to the end of a custom field's developer name unless a deleted
            # field already has that developer name" (Help, "Manage Deleted Custom Fields"): the name is free for a
            # new field, whose values start empty (create_field).
            deleted_name = row["name"].removesuffix("__c") + "_del__c"
            taken = self.store.select(
                "SELECT 1 FROM _custom_fields WHERE object = ? AND name = ? AND deleted = 1", (obj.name, deleted_name)
            )
            self.store.conn.execute(
                "UPDATE _custom_fields SET deleted = 1, name = ? WHERE Id = ?",
                (row["name"] if taken else deleted_name, field_id),
            )
            # The field's permissions go with it (a new field of the same name starts with none).
            self.store.conn.execute('DELETE FROM "FieldPermissions" WHERE Field = ?', (f"{obj.name}.{row['name']}",))
            self._swap(obj, [f for f in obj.fields if f.name != row["name"]])

    def _swap(self, obj: SObject, fields: list[Field], persist: bool = True) -> None:
        new = dataclasses.replace(obj, fields=tuple(fields))
        self.store.replace_object(new)
        for version in (obj, new):
            self.schemas.setdefault(version.schema_id, version)
            if persist:
                self.store.conn.execute(
                    "INSERT OR IGNORE INTO _schema_versions (schema_id, object, fields) VALUES (?, ?, ?)",
                    (version.schema_id, version.name, json.dumps([_field_json(f) for f in version.fields])),
                )
        self.invalidate()

    # -- field-level security ----------------------------------------------------------------------------
    def tooling_fields(self, object_name: str) -> set[str]:
        rows = self.store.select("SELECT name FROM _custom_fields WHERE object = ? AND deleted = 0", (object_name,))
        return {r["name"] for r in rows}

    def hidden_fields(self, object_name: str, user_id: str) -> frozenset[str]:
        """The fields of the object `user_id` cannot read (see the module docstring)."""
        if user_id == self.store.admin_user_id:
            return frozenset()
        key = (object_name, user_id)
        with self._lock:
            known = self._hidden.get(key)
        if known is not None:
            return known
        restricted = self.tooling_fields(object_name)
        granted: set[str] = set()
        if restricted:
            rows = self.store.select(
                'SELECT fp.Field FROM "FieldPermissions" fp JOIN "PermissionSetAssignment" psa '
                "ON psa.PermissionSetId = fp.ParentId WHERE psa.AssigneeId = ? AND fp.SobjectType = ? "
                "AND fp.PermissionsRead = 1 AND fp.IsDeleted = 0 AND psa.IsDeleted = 0",
                (user_id, object_name),
            )
            granted = {r["Field"].partition(".")[2] for r in rows}
        hidden = frozenset(restricted - granted)
        with self._lock:
            self._hidden[key] = hidden
        return hidden

    def view(self, obj: SObject, user_id: str) -> SObject:
        """`obj` as `user_id` sees it: without the fields they cannot read."""
        hidden = self.hidden_fields(obj.name, user_id)
        if not hidden or obj.name not in self.store.by_name:
            return obj
        return _view(obj, hidden)

    # -- writes to the permission objects (REST) ------------------------------------------------------------
    def check_permission_write(self, obj: SObject, values: dict[str, Any], current: dict[str, Any] | None) -> None:
        """What the org checks on a FieldPermissions record: ``Field`` names a field of ``SobjectType``, and
        PermissionsEdit needs PermissionsRead."""
        if obj.name != FIELD_PERMISSIONS.name:
            return
        merged = {**(current or {}), **values}
        sobject, full = merged.get("SobjectType"), merged.get("Field") or ""
        target = self.store.find(sobject) if isinstance(sobject, str) else None
        owner, _, name = full.partition(".")
        if target is None or owner.lower() != target.name.lower() or target.field(name) is None:
            raise ApiError(
                400,
                "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST",
                f"Field: bad value for restricted picklist field: {full} (give <SobjectType>.<Field>, "
                "a field the object has)",
                ["Field"],
            )
        if _true(merged.get("PermissionsEdit")) and not _true(merged.get("PermissionsRead")):
            raise ApiError(
                400,
                "FIELD_INTEGRITY_EXCEPTION",
                "Permission Edit depends on permission(s): Read (set PermissionsRead to true as well)",
                ["PermissionsEdit"],
            )


def _true(value: Any) -> bool:
    return value is True or value == 1 or (isinstance(value, str) and value.lower() == "true")


@functools.lru_cache(maxsize=1024)
def _view(obj: SObject, hidden: frozenset[str]) -> SObject:
    return dataclasses.replace(obj, fields=tuple(f for f in obj.fields if f.name not in hidden))
