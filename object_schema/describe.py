"""What a replica table looks like, derived from an object's describe() metadata.

One `ObjectSchema` per replicated Salesforce object says which fields become columns (docs/design/contract.md §8:
describe fields minus compound parents, formula fields, and the two fields CDC never carries, `IsDeleted` and
`SystemModstamp`, which the replica represents as `_sf_deleted` and `_sf_commit_ts`), the Spark and Arrow type
of each, and how compound fields nested in an event (`BillingAddress: {"City": ...}`) map to component columns.
This is the one answer to "which fields replicate": parsing (spark_ops/parse.py), the fields asked of the org
(`org_fields`: resync, reconcile, poll) and the check for fields describe() does not know (`knows`) all read it.

**Field selection and hashing** (replication.yaml `fields: {include | exclude}`, `hash:`) are decided
here too, once, from describe(): a field not selected is no column, is never asked of the org, and is dropped from
events (`selects`; it still counts as known, so it triggers no describe refresh); `Id` and the record's position
field are always selected; a compound parent name stands for its components. `hashed` names text columns whose
values are stored as SHA-256 digests (object_schema/hashing.py, applied on every write path).
**Formula fields** (replication.yaml `formulas:`, replication/formulas/) are never CDC columns: `columns` and
`arrow_schema()` leave them out, so no writer of change events, reconciles or polls ever writes them (a Delta merge
that does not name a column leaves it as it is). `formulas` names the formula columns a replica keeps (empty: off),
typed by describe()'s `type`; `table_arrow_schema()` is the whole table: the CDC columns, the formula columns and
`_sf_formulas_at` (when its formula values were read). **Derived fields** (`DERIVED_FIELDS`: LastActivityDate,
PhotoUrl), which Salesforce changes without a change event, are read the same way, with the formula fields; the
reading user's own fields (`READER_FIELDS`: LastViewedDate, LastReferencedDate) are never replicated.
**Binary fields** (`BINARY_TYPES`: describe() type `base64`, e.g. Attachment.Body, ContentVersion.VersionData) are
no columns either, by default and for good: Bulk API query jobs cannot read them ("FeatureNotEnabled : Binary field
not supported"), a REST query gives a URL to the blob instead of its bytes (one more call per record to read it), and
file contents do not belong in a table of records. `binary` names them (`BINARY_REASON` says why: the materialization
metadata `fields_excluded` and the field catalog show it); no query of the org names them and an event value for one
is ignored.
**Field names** come from the org and become column names, which delta-rs reads inside merge predicates, update
expressions and the `delta.dataSkippingStatsColumns` property (a comma-separated list): a field named `A,B` or
`x = 1 OR true` would change what they say. So a describe() field is a column only if its name, and its compound
parent's, is a Salesforce API name (shared/names.py, the rule entity names pass); `unnamed` keeps the others as
describe() gave them, never columns, never asked of the org, their event values ignored (`NAME_REASON` says why: the
materialization metadata `fields_excluded` and the field catalog show them, escaped). A real org never names a
field so; a describe file or an impostor org might, and that is no run failure.
Everything here is pure metadata: no Spark session, no I/O besides `shared/names.py`'s rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import types as T

from shared.names import API_NAME_RULE, is_api_name

# Salesforce field type -> replica column type (docs/design/contract.md §8).
_STRING_TYPES = {
    "id",
    "reference",
    "string",
    "picklist",
    "multipicklist",
    "textarea",
    "email",
    "phone",
    "url",
    "combobox",
    "time",
    "encryptedstring",
}
SPARK_TYPES: dict[str, T.DataType] = {
    **{t: T.StringType() for t in _STRING_TYPES},
    "boolean": T.BooleanType(),
    "int": T.LongType(),
    "double": T.DoubleType(),
    "currency": T.DoubleType(),
    "percent": T.DoubleType(),
    "date": T.DateType(),
    "datetime": T.TimestampType(),
}
COMPOUND_TYPES = {"address", "location"}
ORG_ONLY_FIELDS = ("IsDeleted", "SystemModstamp")  # read from the org with every record; never in a change event
# A record's position (`_sf_commit_ts`) is the first of these its object has: objects without CDC may lack
# SystemModstamp (a share object has LastModifiedDate; a field history object, immutable, only CreatedDate).
POSITION_FIELDS = ("SystemModstamp", "LastModifiedDate", "CreatedDate")
# Fields whose value is not on the record but derived from other records, which Salesforce changes without a change
# event on the record (Object Reference, "StandardObjectNameChangeEvent", Change Event Fields: a change event does
# not include "any field whose value isn't on the record and is derived from another record or from a formula, except
# roll-up summary fields ... Examples of fields with derived values include LastActivityDate and PhotoUrl"). As CDC
# columns they would go stale between resyncs: they are none, and are read like formula fields (`calculated`,
# replication.yaml `formulas:`, replication/formulas/).
DERIVED_FIELDS = frozenset({"LastActivityDate", "PhotoUrl"})
# Fields whose value is the reading user's own (Object Reference, "RecentlyViewed": LastViewedDate and
# LastReferencedDate are when "the current user" last viewed or referenced the record): the integration user's
# views, no fact about the record, never in a change event. Never replicated.
READER_FIELDS = frozenset({"LastViewedDate", "LastReferencedDate"})
NOT_IN_EVENTS = frozenset(ORG_ONLY_FIELDS) | DERIVED_FIELDS | READER_FIELDS
# Field types whose values are files (module docstring): never columns, never asked of the org.
BINARY_TYPES = frozenset({"base64"})
BINARY_REASON = (
    "binary (base64) field: not replicated; Bulk API query jobs cannot read it and REST returns a URL to the blob, "
    "not its bytes; read the file itself from /services/data/vXX.X/sobjects/<Object>/<Id>/<Field> if you need it"
)
NAME_REASON = (
    f"not a Salesforce API name ({API_NAME_RULE}): not replicated; a column name is read inside Delta expressions "
    "and table properties, so only an API name becomes one"
)

# System columns every replica carries (docs/design/contract.md §8), then the layout column.
BUCKET_COLUMN = "_sf_bucket"
SYSTEM_COLUMNS: list[tuple[str, T.DataType]] = [
    ("_sf_deleted", T.BooleanType()),
    ("_sf_deleted_at", T.TimestampType()),
    ("_sf_commit_ts", T.TimestampType()),
    ("_sf_replay_id", T.LongType()),
    ("_sf_commit_number", T.LongType()),
    ("_sf_sequence_number", T.LongType()),
    ("_sf_dirty_since", T.TimestampType()),
    ("_sf_source", T.StringType()),
    ("_sf_synced_at", T.TimestampType()),
    (BUCKET_COLUMN, T.StringType()),
]
FORMULAS_AT = "_sf_formulas_at"  # when a row's formula values were read from the org (replication/formulas/)
DEFAULT_BUCKET_CHARS = 13
STATS_COLUMNS = 32  # Delta's default number of leading columns with per-file statistics


def spark_type(sf_type: str) -> T.DataType:
    """The replica column type of a Salesforce field type; unknown types are kept as text."""
    return SPARK_TYPES.get(sf_type, T.StringType())


def _nested_key(parent: str, component: str) -> str:
    """The key a component has inside its compound value in an event.

    `BillingAddress: {"City": ...}` holds `BillingCity`; Contact `Name: {"FirstName": ...}` holds `FirstName`;
    a geolocation `Loc__c: {"Latitude": ...}` holds `Loc__Latitude__s`.
    """
    if parent.endswith("Address"):
        prefix = parent[: -len("Address")]
        if prefix and component.startswith(prefix):
            return component[len(prefix) :]
    if parent.endswith("__c"):
        stem = parent[: -len("c")]
        if component.startswith(stem) and component.endswith("__s"):
            return component[len(stem) : -len("__s")]
    return component


def _part_of(field: dict) -> str | None:
    """The compound parent a describe() field is a part of. A field named as its own compound parent is a part of
    nothing: an org without person accounts describes `Account.Name` so (`"compoundFieldName": "Name"`,
    `"extraTypeInfo": "switchablepersonname"`, no FirstName/LastName), and it is plain text; only an org whose
    describe() has the person name fields (`FirstName`, ... naming `Name`) has person names."""
    parent = field.get("compoundFieldName")
    return parent if parent and parent != field["name"] else None


def well_named(field: dict) -> bool:
    """Whether a describe() field's name, and its compound parent's, may become a column (module docstring)."""
    parent = field.get("compoundFieldName")
    return is_api_name(field.get("name")) and (not parent or is_api_name(parent))


@dataclass(frozen=True)
class ObjectSchema:
    """Replica columns of one object and how event payload keys map onto them."""

    name: str
    columns: tuple[tuple[str, str], ...]  # (column, Salesforce type), in describe order, Id first
    compound: dict[str, dict[str, str]] = field(default_factory=dict)  # parent -> nested key -> column
    ignored: frozenset[str] = frozenset(NOT_IN_EVENTS)  # payload keys that never become columns
    bucket_chars: int = DEFAULT_BUCKET_CHARS
    position_field: str | None = "SystemModstamp"  # the first of POSITION_FIELDS describe() has (None: none)
    has_is_deleted: bool = True  # setup objects may have no IsDeleted (and no recycle bin)
    include: frozenset[str] | None = None  # selected fields (None: all but `exclude`), compound parents expanded
    exclude: frozenset[str] = frozenset()
    hashed: frozenset[str] = frozenset()  # text columns stored as salted SHA-256 (object_schema/hashing.py)
    redact_quarantine: bool = False  # quarantined lines lose the hashed and left-out fields (replication/quarantine.py)
    # every formula field describe() lists and the DERIVED_FIELDS it has: (name, Salesforce type)
    calculated: tuple[tuple[str, str], ...] = ()
    formulas: tuple[tuple[str, str], ...] = ()  # the formula columns this replica keeps (empty: formulas off)
    binary: tuple[str, ...] = ()  # the fields of BINARY_TYPES describe() lists: never columns (BINARY_REASON)
    unnamed: tuple[str, ...] = ()  # describe() fields whose name is no API name, raw: never columns (NAME_REASON)

    @classmethod
    def from_describe(
        cls,
        describe: dict,
        *,
        bucket_chars: int = DEFAULT_BUCKET_CHARS,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        hashed: Iterable[str] = (),
        redact_quarantine: bool = False,
    ) -> ObjectSchema:
        full = dataclasses.replace(cls._all_fields(describe, bucket_chars), redact_quarantine=redact_quarantine)
        if include is None and not exclude and not hashed:
            return full
        return full.selected(include=include, exclude=exclude, hashed=hashed)

    def selected(self, *, include: Iterable[str] | None, exclude: Iterable[str], hashed: Iterable[str]) -> ObjectSchema:
        """This schema with only the selected columns, and `hashed` recorded (ValueError says what is wrong)."""
        known = {*self.column_names, *self.compound}

        def expand(names: Iterable[str], key: str) -> frozenset[str]:
            names = list(names)
            # Excluding a binary field says what happens anyway; asking for one cannot be done.
            if (binary := sorted(set(names) & set(self.binary))) and key != "fields.exclude":
                raise ValueError(
                    f"{self.name}: `{key}` names {', '.join(binary)}: binary (base64) fields are never replicated "
                    "(nothing to select or hash); remove them from replication.yaml"
                )
            names = [n for n in names if n not in self.binary]
            if unknown := sorted(set(names) - known):
                raise ValueError(
                    f"{self.name}: `{key}` names {', '.join(unknown)}, which describe() does not have "
                    "as replicated fields (formula fields and compound parents' parts count by their "
                    "own names); fix the names in replication.yaml"
                )
            return frozenset(c for n in names for c in (self.compound[n].values() if n in self.compound else [n]))

        required = {"Id"} | set(self.column_names).intersection({self.position_field})
        keep = None if include is None else expand(include, "fields.include") | required
        drop = expand(exclude, "fields.exclude") - required
        protect = expand(hashed, "hash")
        schema = dataclasses.replace(self, include=keep, exclude=drop)
        types = dict(self.columns)
        for name in sorted(protect):
            if not schema.selects(name):
                raise ValueError(f"{self.name}: `hash` names {name}, which `fields` leaves out: keep one of the two")
            if name == "Id" or spark_type(types[name]) != T.StringType():
                raise ValueError(
                    f"{self.name}: `hash` names {name} ({types[name]}): only text fields other than Id "
                    "can be hashed; remove it from `hash` (or exclude it with `fields`)"
                )
        columns = tuple(c for c in self.columns if schema.selects(c[0]))
        return dataclasses.replace(schema, columns=columns, hashed=protect)

    def selects(self, name: str) -> bool:
        """Whether field `name` replicates under `fields` (a field describe() lacks: when `include` allows it)."""
        return name not in self.exclude and (self.include is None or name in self.include)

    @classmethod
    def _all_fields(cls, describe: dict, bucket_chars: int) -> ObjectSchema:
        fields = [f for f in describe["fields"] if well_named(f)]
        unnamed = tuple(str(f.get("name")) for f in describe["fields"] if not well_named(f))
        parents = {parent for f in fields if (parent := _part_of(f))}
        parents |= {f["name"] for f in fields if f.get("type") in COMPOUND_TYPES}
        compound: dict[str, dict[str, str]] = {}
        columns: list[tuple[str, str]] = []
        for f in fields:
            name = f["name"]
            if parent := _part_of(f):
                compound.setdefault(parent, {})[_nested_key(parent, name)] = name
            # A compound parent that can be written is a column too: a person-account org's Account.Name is a
            # business account's own text, and a person account's full name as REST and Bulk return it.
            if (name in parents and not f.get("createable")) or f.get("calculated") or name in NOT_IN_EVENTS:
                continue
            if f.get("type") in BINARY_TYPES:
                continue
            columns.append((name, f["type"]))
        columns.sort(key=lambda c: c[0] != "Id")
        if not columns or columns[0][0] != "Id":
            raise ValueError(f"describe() of {describe.get('name')} has no Id field; cannot build a replica")
        binary = tuple(f["name"] for f in fields if f.get("type") in BINARY_TYPES)
        ignored = frozenset(
            NOT_IN_EVENTS | {f["name"] for f in fields if f.get("calculated")} | set(binary) | set(unnamed)
        )
        names = {f["name"] for f in fields}
        position = next((p for p in POSITION_FIELDS if p in names), None)
        calculated = tuple((f["name"], f["type"]) for f in fields if f.get("calculated") or f["name"] in DERIVED_FIELDS)
        return cls(
            describe["name"],
            tuple(columns),
            compound,
            ignored,
            bucket_chars,
            position,
            "IsDeleted" in names,
            calculated=calculated,
            binary=binary,
            unnamed=unnamed,
        )

    def with_formulas(self, names: Iterable[str] | None = None) -> ObjectSchema:
        """This schema keeping formula columns: `names` (None: every formula field describe() lists)."""
        known = dict(self.calculated)
        if names is not None and (unknown := sorted(set(names) - set(known))):
            raise ValueError(
                f"{self.name}: `formulas.fields` names {', '.join(unknown)}, which describe() does not "
                f"list as formula fields (calculated) or derived fields ({', '.join(sorted(DERIVED_FIELDS))}); "
                f"formula and derived fields: {', '.join(known) or 'none'}"
            )
        wanted = set(known if names is None else names)
        return dataclasses.replace(self, formulas=tuple(c for c in self.calculated if c[0] in wanted))

    @property
    def formula_names(self) -> list[str]:
        return [c for c, _ in self.formulas]

    def formula_arrow_fields(self) -> list[pa.Field]:
        """The formula columns and `_sf_formulas_at` (none when formulas are off)."""
        if not self.formulas:
            return []
        return [pa.field(c, _ARROW[type(spark_type(t))]) for c, t in self.formulas] + [
            pa.field(FORMULAS_AT, pa.timestamp("us", tz="UTC"))
        ]

    def table_arrow_schema(self) -> pa.Schema:
        """Every column of the replica table: `arrow_schema()` plus the formula columns and `_sf_formulas_at`."""
        base = self.arrow_schema()
        return pa.schema([*base, *self.formula_arrow_fields()])

    @property
    def column_names(self) -> list[str]:
        return [c for c, _ in self.columns]

    @property
    def org_fields(self) -> list[str]:
        """The fields a query of the org selects: the columns, then those of `ORG_ONLY_FIELDS` the object has (the
        row's deleted flag and position)."""
        extra = [f for f in ORG_ONLY_FIELDS if f != "IsDeleted" or self.has_is_deleted]
        if self.position_field != "SystemModstamp":
            extra.remove("SystemModstamp")
        return [*self.column_names, *extra]

    def knows(self, name: str) -> bool:
        """Whether an event field `name` has a place here: a column, a compound part or parent, or a field that
        never becomes a column (formula, `ORG_ONLY_FIELDS`), or one `fields` leaves out."""
        return (
            name in self.ignored
            or name in self.compound
            or name in self.dotted_names
            or name in set(self.column_names)
            or not self.selects(self.dotted_names.get(name, name))
        )

    @property
    def person_name_parts(self) -> list[str]:
        """The columns that are parts of a compound parent which is itself a column: a person-account org's
        `FirstName`, `LastName`, ... of `Account.Name` (a union: a business account's text, a person's name
        record). An event sets them only by carrying the name record (spark_ops/fold.py fetches the Name then)."""
        columns = set(self.column_names)
        return sorted({c for parent, parts in self.compound.items() if parent in columns for c in parts.values()})

    @property
    def dotted_names(self) -> dict[str, str]:
        """`BillingAddress.City` (as changedFields/nulledFields name it) -> `BillingCity`."""
        return {f"{p}.{k}": c for p, m in self.compound.items() for k, c in m.items()}

    def without_columns(self, names: Iterable[str]) -> ObjectSchema:
        """This schema with `names` no columns: fields the replica keeps but no longer follows (their values in
        events are ignored, no query of the org names them)."""
        gone = frozenset(names) & set(self.column_names)
        if not gone:
            return self
        columns = tuple((n, t) for n, t in self.columns if n not in gone)
        return dataclasses.replace(self, columns=columns, ignored=self.ignored | gone)

    def with_columns(self, extra: dict[str, str]) -> ObjectSchema:
        """This schema plus fields seen later (schema evolution: added, never dropped; binary ones never)."""
        known = set(self.column_names)
        added = tuple((n, t) for n, t in extra.items() if n not in known and self.selects(n) and t not in BINARY_TYPES)
        return dataclasses.replace(self, columns=self.columns + added)

    def spark_schema(self) -> T.StructType:
        cols = [T.StructField(c, spark_type(t), c != "Id") for c, t in self.columns]
        return T.StructType(cols + [T.StructField(n, t, True) for n, t in SYSTEM_COLUMNS])

    def arrow_schema(self) -> pa.Schema:
        return spark_to_arrow_schema(self.spark_schema())

    def table_properties(self) -> dict[str, str]:
        """Delta table properties of a new replica: per-file statistics on the leading columns (Delta's default)
        and on every system column, wherever a wide describe() puts them: the dirty count is read from the
        statistics of `_sf_dirty_since` (replication/counts.py)."""
        names = [f.name for f in self.spark_schema().fields]
        stats = dict.fromkeys([*names[:STATS_COLUMNS], *(n for n, _ in SYSTEM_COLUMNS if n != BUCKET_COLUMN)])
        return {"delta.dataSkippingStatsColumns": ",".join(stats)}


_ARROW = {
    T.StringType: pa.string(),
    T.BooleanType: pa.bool_(),
    T.LongType: pa.int64(),
    T.DoubleType: pa.float64(),
    T.DateType: pa.date32(),
    T.TimestampType: pa.timestamp("us", tz="UTC"),
}


def spark_to_arrow_schema(schema: T.StructType) -> pa.Schema:
    """Arrow schema of the flat replica types (what delta-rs stores)."""
    return pa.schema([pa.field(f.name, _ARROW[type(f.dataType)], f.nullable) for f in schema.fields])
