"""Generated custom objects, for orgs with hundreds of objects: ``Thing_001__c``, ``Thing_002__c``, ...

A real org's custom objects are what makes it large: an admin adds an object with a dozen fields of the usual types
(Salesforce Help, "Custom Field Types"): Text, Picklist, Number, Currency, Percent, Date, Date/Time, Checkbox,
Lookup Relationship, Long Text Area, Email, Phone, URL. Each generated object has the standard fields every custom
object has (Id, OwnerId, IsDeleted, Name, the audit fields, SystemModstamp), one custom field of each core type,
and a few more drawn from a seeded mix, so the objects differ from one another but object ``n`` is always the same
(its field list comes from ``random.Random(n)``): a restarted org, a test and a benchmark all see the same schema.

Key prefixes follow Salesforce's for custom objects: ``a`` and two base-62 characters (``a01``, ``a02``, ...).
A lookup points at Account or at a Thing with a lower number, so an org built in number order always has a target.

Registering them (``schema.register_custom_objects``) makes them known to every part of the emulator (describe,
SOQL, REST, Bulk, CDC, Pub/Sub); a ``Store`` creates tables only for the ones its org has (``Emulator(
custom_objects=N)``), so orgs without them are unchanged.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from salesforce_emulator import ids
from salesforce_emulator.schema import Field, SObject, audit_fields, deleted_field, id_field

PREFIX = "Thing_"
MAX_CUSTOM_OBJECTS = 999  # Thing_001__c .. Thing_999__c (three digits; a00..a{999 in base 62} prefixes)
PICKLIST_VALUES = ("New", "Active", "On Hold", "Closed", "Archived")
# One field of each core type, always; then extras from this mix (type, weight).
CORE_TYPES = ("string", "picklist", "double", "currency", "date", "datetime", "boolean", "reference", "textarea")
EXTRA_MIX = {
    "string": 5,
    "picklist": 4,
    "double": 3,
    "currency": 2,
    "percent": 2,
    "date": 2,
    "datetime": 1,
    "boolean": 3,
    "email": 1,
    "phone": 1,
    "url": 1,
    "reference": 1,
}
_LABELS = {
    "string": "Code",
    "picklist": "Status",
    "double": "Quantity",
    "currency": "Amount",
    "percent": "Share",
    "date": "Due",
    "datetime": "Reviewed",
    "boolean": "Active",
    "reference": "Parent",
    "textarea": "Notes",
    "email": "Contact_Email",
    "phone": "Contact_Phone",
    "url": "Link",
}


def custom_object_name(number: int) -> str:
    return f"{PREFIX}{number:03d}__c"


def custom_object_number(name: str) -> int | None:
    """``Thing_042__c`` -> 42; None for any other name."""
    if not (name.startswith(PREFIX) and name.endswith("__c")):
        return None
    digits = name[len(PREFIX) : -3]
    return int(digits) if digits.isdigit() and len(digits) == 3 and 1 <= int(digits) <= MAX_CUSTOM_OBJECTS else None


@functools.cache
def custom_object(number: int) -> SObject:
    """The generated object ``number`` (1-based): always the same fields for the same number."""
    if not 1 <= number <= MAX_CUSTOM_OBJECTS:
        raise ValueError(f"custom object numbers run from 1 to {MAX_CUSTOM_OBJECTS}, got {number}")
    rng = random.Random(number)
    kinds = list(CORE_TYPES) + rng.choices(list(EXTRA_MIX), list(EXTRA_MIX.values()), k=rng.randint(2, 10))
    custom = tuple(_custom_field(rng, kind, index, number) for index, kind in enumerate(kinds, start=1))
    fields = (
        id_field() + deleted_field() + (Field("Name", "string", nillable=False, length=80),) + custom + audit_fields()
    )
    return SObject(custom_object_name(number), "a" + ids.to_base62(number, width=2), fields, custom=True)


WIDE_OBJECT = "Wide_Thing__c"


@functools.cache
def wide_object(columns: int = 64) -> SObject:
    """``Wide_Thing__c``: the standard fields of a custom object and custom fields of every usual type, `columns`
    fields in all (the bulk-only benchmark object: bulk_synthetic.py)."""
    rng = random.Random(columns)
    standard = id_field() + deleted_field() + (Field("Name", "string", nillable=False, length=80),) + audit_fields()
    kinds = [*CORE_TYPES, *EXTRA_MIX]
    custom = tuple(
        _custom_field(rng, kinds[index % len(kinds)], index + 1, 1) for index in range(max(columns - len(standard), 0))
    )
    return SObject(WIDE_OBJECT, "aZz", standard[:3] + custom + standard[3:], custom=True)


def _custom_field(rng: random.Random, kind: str, index: int, number: int) -> Field:
    name = f"{_LABELS[kind]}_{index:02d}__c"
    if kind == "reference":
        target = "Account" if number == 1 or rng.random() < 0.5 else custom_object_name(rng.randint(1, number - 1))
        return Field(name, "reference", length=18, reference_to=(target,))
    if kind == "picklist":
        return Field(name, "picklist", length=255, picklist=PICKLIST_VALUES)
    if kind == "boolean":
        return Field(name, "boolean", nillable=False, default=0)
    lengths = {"string": 255, "textarea": 32768, "email": 80, "phone": 40, "url": 255}
    return Field(name, kind, length=lengths.get(kind))


# -- values (the workload's) ----------------------------------------------------------------------------------
_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]


def field_value(rng: random.Random, fld: Field, targets: dict[str, list[str]]) -> Any:
    """A plausible value of a generated custom field; a lookup takes a record of `targets` (ids by object), or
    None when its target has none yet."""
    kind = fld.type
    if kind == "string":
        return f"{rng.choice(_WORDS).upper()}-{rng.randrange(10**6):06d}"
    if kind == "picklist":
        return rng.choice(PICKLIST_VALUES)
    if kind in ("double", "percent"):
        return round(rng.uniform(0, 100 if kind == "percent" else 10_000), 2)
    if kind == "currency":
        return float(rng.randint(1, 10**6)) / 100
    if kind == "date":
        return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == "datetime":
        return (
            f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:00.000Z"
        )
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "reference":
        pool = targets.get(fld.reference_to[0]) or []
        return rng.choice(pool) if pool else None
    if kind == "textarea":
        return "\n".join(" ".join(rng.choices(_WORDS, k=rng.randint(4, 12))) for _ in range(rng.randint(1, 6)))
    if kind == "email":
        return f"{rng.choice(_WORDS)}.{rng.randrange(10**5)}@example.org"
    if kind == "phone":
        return f"+1 555 {rng.randrange(10000):04d}"
    if kind == "url":
        return f"https://{rng.choice(_WORDS)}.example/{rng.randrange(1000)}"
    raise ValueError(f"no value generator for {fld.name} ({kind})")


def custom_fields(obj: SObject) -> list[Field]:
    return [f for f in obj.fields if f.name.endswith("__c")]


def new_record(rng: random.Random, obj: SObject, targets: dict[str, list[str]]) -> dict[str, Any]:
    number = custom_object_number(obj.name)
    values = {"Name": f"{obj.name[:-3]} {number}-{rng.randrange(10**6)}"}
    for fld in custom_fields(obj):
        if fld.type == "boolean" or rng.random() < 0.85:  # a few fields left empty, as users leave them
            values[fld.name] = field_value(rng, fld, targets)
    return values


def nullable(obj: SObject) -> list[str]:
    return [f.name for f in custom_fields(obj) if f.nillable]
