"""The org's data model: which objects exist, their fields, and what describe() says about them.

One declarative table per object. Everything else (SQLite columns, SOQL validation, describe(), CDC payload
nesting, formula evaluation) is derived from it, so adding a field is one line here. The shapes follow
``samples/basic/describe/*.json``: compound parents (``BillingAddress``, Contact ``Name``) are listed
as fields but never stored; their components carry ``compoundFieldName``.

**Formula fields** are computed by the org whenever a record is read (REST, SOQL, Bulk API 2.0), never stored and
never in a change event (Change Data Capture Developer Guide: "Formula fields aren't supported in Change Data
Capture"). describe() gives them as Salesforce's REST describe does: ``calculated: true``, the formula text in
``calculatedFormula``, ``type`` the formula's return type (double, currency, string, date, ...), ``createable`` and
``updateable`` false. A formula is a function of the record's stored row and a lookup of other records
(``related(object, id)``, None for none or a deleted one): a cross-object formula (Contact ``Account_Industry__c``
= ``TEXT(Account.Industry)``) changes when its parent changes, with no event on the record itself.

An org has Person Accounts enabled (Salesforce Help, "Person Accounts"), or not (``org_objects``):

- with them (``ACCOUNT``, the default), Account carries ``IsPersonAccount``, the person name components
  (``Salutation``, ``FirstName``, ``MiddleName``, ``LastName``, ``Suffix``, each with ``compoundFieldName``
  ``Name``) and ``Person*`` fields. ``Account.Name`` stays a stored, writable field: a business account sets it, a
  person account's is derived from the components (``person_name``) and read-only, as REST and Bulk return it. Its
  CDC value is therefore a union: a string for a business account, the ``Switchable_PersonName`` record for a
  person account;
- without them (``BUSINESS_ACCOUNT``), Account has no name parts and no ``Person*`` fields, and its ``Name`` is, as a
  real org's describe() gives it, its own compound parent: ``"compoundFieldName": "Name"``, ``"extraTypeInfo":
  "switchablepersonname"``, createable and updateable (the describe of Account in CumulusCI's recorded cassette
  ``cumulusci/tests/shared_cassettes/GET_sobjects_Account_describe.yaml``, SFDO-Tooling/CumulusCI). It is plain text
  everywhere, in change events too.

Contact has a custom ``time`` field (``Best_Time_To_Call__c``).
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A related record by object and id (None: no id, no such record, or deleted), for cross-object formulas.
Related = Callable[[str, "str | None"], "dict[str, Any] | None"]
Formula = Callable[[dict[str, Any], Related], Any]

AUDIT_FIELDS = ("CreatedDate", "CreatedById", "LastModifiedDate", "LastModifiedById")
SYSTEM_FIELDS = ("IsDeleted", "SystemModstamp")
READ_ONLY = {"Id", "IsDeleted", "SystemModstamp", *AUDIT_FIELDS}


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    nillable: bool = True
    length: int | None = None
    compound: str | None = None  # compoundFieldName: the parent compound field
    key: str | None = None  # the component's key inside the nested CDC / REST value
    calculated: bool = False
    parent: bool = False  # a compound parent (address, or a person's Name): derived, never stored
    updateable: bool = True
    default: Any = None
    label: str | None = None
    formula: str | None = None  # calculatedFormula: the formula text of a calculated field (described, not parsed)
    reference_to: tuple[str, ...] = ()  # a lookup's target objects (describe's referenceTo)
    picklist: tuple[str, ...] = ()  # a picklist's values (describe's picklistValues)
    extra_type: str | None = None  # describe's extraTypeInfo (switchablepersonname, plaintextarea, imageurl, ...)
    precision: int | None = None  # a number's digits in all (describe's precision; None: 18)
    scale: int | None = None  # a number's digits after the point (describe's scale; None: 2)

    @property
    def part_of(self) -> str | None:
        """The compound parent this field is a part of: its ``compoundFieldName``, unless that names the field
        itself (a business-only org's ``Account.Name``: a field of its own, plain text)."""
        return self.compound if self.compound != self.name else None

    @property
    def stored(self) -> bool:
        return not (self.calculated or self.parent)

    @property
    def createable(self) -> bool:
        return self.stored and self.updateable and self.name not in READ_ONLY

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "label": self.label or self.name,
            "type": self.type,
            "nillable": self.nillable,
            "compoundFieldName": self.compound,
            "extraTypeInfo": self.extra_type,
            "calculated": self.calculated,
            "calculatedFormula": self.formula,
            "formulaTreatNullNumberAsZero": False,
            "filterable": not self.parent,
            "createable": self.createable,
            "updateable": self.createable,
            "custom": self.name.endswith("__c"),
            "soapType": _SOAP_TYPES.get(self.type, "xsd:string"),
        }
        if self.length is not None:
            out["length"] = self.length
        if self.type in ("double", "currency", "percent"):
            out |= {"precision": self.precision or 18, "scale": 2 if self.scale is None else self.scale}
        if self.type in ("picklist", "multipicklist"):
            out["picklistValues"] = [
                {"value": v, "label": v, "active": True, "defaultValue": False} for v in self.picklist
            ]
        if self.reference_to:
            out["referenceTo"] = list(self.reference_to)
            out["relationshipName"] = self.name[:-3] + "__r" if self.name.endswith("__c") else self.name[:-2]
        return out


MASTER_RECORD_TYPE_ID = "012000000000000AAA"  # the id every org gives the master record type
_SOAP_TYPES = {
    "id": "tns:ID",
    "reference": "tns:ID",
    "boolean": "xsd:boolean",
    "int": "xsd:int",
    "double": "xsd:double",
    "currency": "xsd:double",
    "percent": "xsd:double",
    "date": "xsd:date",
    "datetime": "xsd:dateTime",
    "time": "xsd:time",
    "address": "urn:address",
    "base64": "xsd:base64Binary",
}


@dataclass(frozen=True, eq=False)
class SObject:
    name: str
    key_prefix: str
    fields: tuple[Field, ...]
    formulas: dict[str, Formula] = field(default_factory=dict)
    deletable: bool = True
    # Columns the emulator keeps for its own clock and recycle bin (IsDeleted, SystemModstamp, audit fields) that
    # this object does not have in a real org: stored, never described, queried or returned.
    internal: tuple[Field, ...] = ()
    cdc: bool = True  # Change Data Capture can be enabled for it (history, share and setup objects: no)
    # stored values the org derives from others (a person account's Name): (row after the write, the org's name
    # order, a key of NAME_ORDERS) -> values
    derived: Callable[[dict[str, Any], str], dict[str, Any]] | None = None
    custom: bool = False  # a custom object (``__c``): custom_objects.py generates them
    # Bulk API query jobs accept it; some standard objects they refuse ("Entity 'X' is not supported by the Bulk
    # API.": api_bulk.py), REST queries read them
    bulk: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
        object.__setattr__(self, "by_lower", {f.name.lower(): f for f in self.fields})

    @property
    def stored_fields(self) -> list[Field]:
        return [f for f in self.fields if f.stored] + list(self.internal)

    @property
    def recycle_bin(self) -> bool:
        """Whether deleted records stay queryable (queryAll, IsDeleted); without IsDeleted a delete is final."""
        return "IsDeleted" in self.by_name  # type: ignore[attr-defined]

    def field(self, name: str) -> Field | None:
        return self.by_lower.get(name.lower())  # type: ignore[attr-defined]

    def components(self, parent: str) -> list[Field]:
        return [f for f in self.fields if f.part_of == parent]

    @functools.cached_property
    def schema_id(self) -> str:
        """A stable id of the field list, in the spirit of the CDC ``schema`` attribute."""
        digest = hashlib.sha256("|".join(f"{f.name}:{f.type}" for f in self.fields).encode()).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode().rstrip("=")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.name,
            "keyPrefix": self.key_prefix,
            "custom": self.custom,
            "createable": True,
            "updateable": True,
            "deletable": self.deletable,
            "undeletable": self.deletable,
            "queryable": True,
            "replicateable": True,
            "fields": [f.describe() for f in self.fields],
            # Every object describes its master record type, the one a record without a record type of its own has
            # (SOAP API Developer Guide, DescribeSObjectResult, RecordTypeInfo: `master`).
            "recordTypeInfos": [
                {
                    "active": True,
                    "available": True,
                    "defaultRecordTypeMapping": True,
                    "developerName": "Master",
                    "master": True,
                    "name": "Master",
                    "recordTypeId": MASTER_RECORD_TYPE_ID,
                    "urls": {
                        "layout": f"/services/data/v{{version}}/sobjects/{self.name}/describe/layouts/{MASTER_RECORD_TYPE_ID}"
                    },
                }
            ],
            "urls": {"sobject": f"/services/data/v{{version}}/sobjects/{self.name}"},
        }


def id_field() -> tuple[Field, ...]:
    return (Field("Id", "id", nillable=False, length=18, updateable=False),)


def deleted_field() -> tuple[Field, ...]:
    return (Field("IsDeleted", "boolean", nillable=False, updateable=False, default=0),)


def audit_fields(owner: bool = True) -> tuple[Field, ...]:
    owned = (Field("OwnerId", "reference", nillable=False, length=18),) if owner else ()
    return (
        *owned,
        Field("CreatedDate", "datetime", nillable=False, updateable=False),
        Field("CreatedById", "reference", nillable=False, length=18, updateable=False),
        Field("LastModifiedDate", "datetime", nillable=False, updateable=False),
        Field("LastModifiedById", "reference", nillable=False, length=18, updateable=False),
        Field("SystemModstamp", "datetime", nillable=False, updateable=False),
    )


def _address(prefix: str, parent: str) -> tuple[Field, ...]:
    parts = [
        ("Street", "textarea", 255),
        ("City", "string", 40),
        ("State", "string", 80),
        ("PostalCode", "string", 20),
        ("Country", "string", 80),
        ("Latitude", "double", None),
        ("Longitude", "double", None),
        ("GeocodeAccuracy", "picklist", None),
    ]
    comps = tuple(Field(prefix + key, t, length=n, compound=parent, key=key) for key, t, n in parts)
    return (*comps, Field(parent, "address", parent=True, updateable=False))


def _person_name(last_nillable: bool = False) -> tuple[Field, ...]:
    return (
        Field("Salutation", "picklist", length=255, compound="Name", key="Salutation"),
        Field("FirstName", "string", length=40, compound="Name", key="FirstName"),
        Field("LastName", "string", nillable=last_nillable, length=80, compound="Name", key="LastName"),
        Field("Name", "string", nillable=False, length=121, parent=True, updateable=False),
    )


PERSON_NAME_PARTS = ("FirstName", "MiddleName", "LastName", "Suffix")  # the order Name joins them in (western)
# The order a person's Name joins its parts in, by the org's locale (Salesforce Help, "Name Order by Locale":
# eastern-order locales, such as Japanese or Chinese, put the last name first). Change events never carry the
# result, so a replica cannot know it but by asking the org.
NAME_ORDERS = {"western": PERSON_NAME_PARTS, "eastern": ("LastName", "FirstName", "MiddleName", "Suffix")}


def _person_account_name() -> tuple[Field, ...]:
    return (
        Field("Salutation", "picklist", length=255, compound="Name", key="Salutation"),
        Field("FirstName", "string", length=40, compound="Name", key="FirstName"),
        Field("LastName", "string", length=80, compound="Name", key="LastName"),
        Field("MiddleName", "string", length=40, compound="Name", key="MiddleName"),
        Field("Suffix", "string", length=40, compound="Name", key="Suffix"),
    )


def person_name(row: dict[str, Any], order: str = "western") -> str | None:
    """A person account's Name: its name parts joined by spaces in the org's `order` (the salutation is not part
    of it)."""
    return " ".join(row[p] for p in NAME_ORDERS[order] if row.get(p)) or None


def _account_derived(row: dict[str, Any], order: str) -> dict[str, Any]:
    return {"Name": person_name(row, order)} if row.get("IsPersonAccount") else {}


def _account_score(row: dict[str, Any], related: Related) -> float | None:
    revenue, employees = row.get("AnnualRevenue"), row.get("NumberOfEmployees")
    if revenue is None or not employees:
        return None
    return round(revenue / employees / 1000.0, 2)


def _revenue_band(row: dict[str, Any], related: Related) -> str | None:
    revenue = row.get("AnnualRevenue")
    if revenue is None:
        return None
    return "Small" if revenue < 1_000_000 else "Medium" if revenue < 50_000_000 else "Large"


def _account_field(name: str) -> Formula:
    """A cross-object formula on a child of Account: ``Account.<name>`` (null without a live parent)."""

    def value(row: dict[str, Any], related: Related) -> Any:
        parent = related("Account", row.get("AccountId"))
        return parent.get(name) if parent else None

    return value


def _expected_amount(row: dict[str, Any], related: Related) -> float | None:
    amount, probability = row.get("Amount"), row.get("Probability")
    return None if amount is None or probability is None else round(amount * probability / 100.0, 2)


def _follow_up_date(row: dict[str, Any], related: Related) -> str | None:
    close = row.get("CloseDate")
    return None if not close else (datetime.date.fromisoformat(close) + datetime.timedelta(days=7)).isoformat()


def _account(person_accounts: bool) -> SObject:
    """Account of an org with Person Accounts enabled, or of one without (see the module docstring)."""
    if person_accounts:
        name: tuple[Field, ...] = (
            Field("Name", "string", nillable=False, length=255),
            *_person_account_name(),
            Field("IsPersonAccount", "boolean", nillable=False, default=0),
            Field("PersonEmail", "email", length=80),
            Field("PersonBirthdate", "date"),
        )
    else:
        name = (
            Field(
                "Name",
                "string",
                nillable=False,
                length=255,
                compound="Name",
                extra_type="switchablepersonname",
                label="Account Name",
            ),
        )
    return SObject(
        "Account",
        "001",
        id_field()
        + deleted_field()
        + name
        + (
            Field("Type", "picklist", length=255),
            Field("Industry", "picklist", length=255),
            Field("AnnualRevenue", "currency"),
            Field("NumberOfEmployees", "int"),
            Field("Rating", "picklist", length=255),
            Field("Phone", "phone", length=40),
            Field("Website", "url", length=255),
            Field("Description", "textarea", length=32000),
        )
        + _address("Billing", "BillingAddress")
        + _address("Shipping", "ShippingAddress")
        + audit_fields()
        + (
            Field(
                "Account_Score__c",
                "double",
                calculated=True,
                updateable=False,
                formula="ROUND(AnnualRevenue / NumberOfEmployees / 1000, 2)",
            ),
            Field(
                "Revenue_Band__c",
                "string",
                length=1300,
                calculated=True,
                updateable=False,
                formula='IF(ISBLANK(AnnualRevenue), null, IF(AnnualRevenue < 1000000, "Small", '
                'IF(AnnualRevenue < 50000000, "Medium", "Large")))',
            ),
        ),
        formulas={"Account_Score__c": _account_score, "Revenue_Band__c": _revenue_band},
        derived=_account_derived if person_accounts else None,
    )


ACCOUNT = _account(person_accounts=True)
BUSINESS_ACCOUNT = _account(person_accounts=False)

CONTACT = SObject(
    "Contact",
    "003",
    id_field()
    + deleted_field()
    + (Field("AccountId", "reference", length=18),)
    + _person_name()
    + (
        Field("Title", "string", length=128),
        Field("Email", "email", length=80),
        Field("Phone", "phone", length=40),
        Field("Birthdate", "date"),
        Field("Best_Time_To_Call__c", "time", label="Best Time to Call"),
        Field("HasOptedOutOfEmail", "boolean", nillable=False, default=0),
    )
    + _address("Mailing", "MailingAddress")
    + audit_fields()
    + (
        Field(
            "Account_Industry__c",
            "string",
            length=1300,
            calculated=True,
            updateable=False,
            formula="TEXT(Account.Industry)",
        ),
        Field("Account_Revenue__c", "currency", calculated=True, updateable=False, formula="Account.AnnualRevenue"),
    ),
    formulas={"Account_Industry__c": _account_field("Industry"), "Account_Revenue__c": _account_field("AnnualRevenue")},
)

OPPORTUNITY = SObject(
    "Opportunity",
    "006",
    id_field()
    + deleted_field()
    + (
        Field("AccountId", "reference", length=18),
        Field("Name", "string", nillable=False, length=120),
        Field("StageName", "picklist", nillable=False, length=255),
        Field("Amount", "currency"),
        Field("Probability", "percent"),
        Field("CloseDate", "date", nillable=False),
        Field("IsWon", "boolean", nillable=False, default=0),
        Field("LeadSource", "picklist", length=255),
        Field("Description", "textarea", length=32000),
    )
    + audit_fields()
    + (
        Field("Expected_Amount__c", "currency", calculated=True, updateable=False, formula="Amount * Probability"),
        Field("Follow_Up_Date__c", "date", calculated=True, updateable=False, formula="CloseDate + 7"),
    ),
    formulas={"Expected_Amount__c": _expected_amount, "Follow_Up_Date__c": _follow_up_date},
)

LEAD = SObject(
    "Lead",
    "00Q",
    id_field()
    + deleted_field()
    + _person_name()
    + (
        Field("Company", "string", nillable=False, length=255),
        Field("Title", "string", length=128),
        Field("Email", "email", length=80),
        Field("Phone", "phone", length=40),
        Field("Status", "picklist", nillable=False, length=255, default="Open - Not Contacted"),
        Field("LeadSource", "picklist", length=255),
        Field("IsConverted", "boolean", nillable=False, default=0),
        Field("ConvertedDate", "date"),
        Field("ConvertedAccountId", "reference", length=18),
        Field("ConvertedContactId", "reference", length=18),
        Field("ConvertedOpportunityId", "reference", length=18),
    )
    + _address("", "Address")
    + audit_fields(),
)

CASE = SObject(
    "Case",
    "500",
    id_field()
    + deleted_field()
    + (
        Field("CaseNumber", "string", nillable=False, length=30, updateable=False),
        Field("AccountId", "reference", length=18),
        Field("ContactId", "reference", length=18),
        Field("Subject", "string", length=255),
        Field("Description", "textarea", length=32000),
        Field("Status", "picklist", nillable=False, length=255, default="New"),
        Field("Priority", "picklist", length=255),
        Field("Origin", "picklist", length=255),
        Field("IsClosed", "boolean", nillable=False, default=0),
        Field("ClosedDate", "datetime"),
    )
    + audit_fields(),
)

USER = SObject(
    "User",
    "005",
    id_field()
    + deleted_field()
    + _person_name()
    + (
        Field("Username", "string", nillable=False, length=80),
        Field("Email", "email", nillable=False, length=128),
        Field("IsActive", "boolean", nillable=False, default=1),
    )
    + audit_fields(owner=False),
    deletable=False,
)


def _lacking(
    name: str,
    key_prefix: str,
    fields: tuple[Field, ...],
    missing: tuple[str, ...],
    *,
    deletable: bool = True,
    bulk: bool = True,
) -> SObject:
    """An object without some of the system fields every other object has (those are kept internal), and no CDC."""
    return SObject(
        name,
        key_prefix,
        tuple(f for f in fields if f.name not in missing),
        deletable=deletable,
        cdc=False,
        internal=tuple(f for f in fields if f.name in missing),
        bulk=bulk,
    )


# Objects without CDC that polling meets, shaped as in a real org: a field history object has only CreatedDate (no
# SystemModstamp, no LastModifiedDate), a share object LastModifiedDate (no SystemModstamp, no CreatedDate), a
# setup object like UserRole no IsDeleted (and no CreatedDate).
ACCOUNT_HISTORY = _lacking(
    "AccountHistory",
    "017",
    id_field()
    + deleted_field()
    + (
        Field("AccountId", "reference", nillable=False, length=18),
        Field("Field", "picklist", nillable=False, length=255),
        Field("DataType", "picklist", length=255),
        Field("OldValue", "anyType"),
        Field("NewValue", "anyType"),
    )
    + audit_fields(owner=False),
    ("LastModifiedDate", "LastModifiedById", "SystemModstamp"),
    deletable=False,
)

ACCOUNT_SHARE = _lacking(
    "AccountShare",
    "00r",
    id_field()
    + deleted_field()
    + (
        Field("AccountId", "reference", nillable=False, length=18),
        Field("UserOrGroupId", "reference", nillable=False, length=18),
        Field("AccountAccessLevel", "picklist", nillable=False, length=40),
        Field("OpportunityAccessLevel", "picklist", nillable=False, length=40),
        Field("CaseAccessLevel", "picklist", length=40),
        Field("ContactAccessLevel", "picklist", length=40),
        Field("RowCause", "picklist", length=40),
    )
    + audit_fields(owner=False),
    ("CreatedDate", "CreatedById", "SystemModstamp"),
)

USER_ROLE = _lacking(
    "UserRole",
    "00E",
    id_field()
    + deleted_field()
    + (
        Field("Name", "string", nillable=False, length=80),
        Field("DeveloperName", "string", length=80),
        Field("ParentRoleId", "reference", length=18),
        Field("RollupDescription", "string", length=80),
    )
    + audit_fields(owner=False),
    ("IsDeleted", "CreatedDate", "CreatedById"),
)


def _attachment_derived(row: dict[str, Any], order: str) -> dict[str, Any]:
    """An attachment's BodyLength: the size of its file, in bytes."""
    return {"BodyLength": len(base64.b64decode(row["Body"])) if row.get("Body") else None}


# A file attached to a record (Object Reference, "Attachment"): its contents are the base64 field `Body`, which REST
# returns as the URL of the blob (`/services/data/vXX.X/sobjects/Attachment/<Id>/Body`, the "sObject Blob Get"
# resource, which answers with the bytes) and Bulk API query jobs refuse ("FeatureNotEnabled : Binary field not
# supported"). No Change Data Capture: polled.
ATTACHMENT = SObject(
    "Attachment",
    "00P",
    id_field()
    + deleted_field()
    + (
        Field("ParentId", "reference", nillable=False, length=18),
        Field("Name", "string", nillable=False, length=255, label="File Name"),
        Field("IsPrivate", "boolean", nillable=False, default=0, label="Private"),
        Field("ContentType", "string", length=120, label="Content Type"),
        Field("BodyLength", "int", updateable=False, label="Body Length"),
        Field("Body", "base64", nillable=False, label="Body"),
        Field("Description", "textarea", length=500),
    )
    + audit_fields(),
    cdc=False,
    derived=_attachment_derived,
)

# A value of Case's Status picklist with its meaning (Object Reference, "CaseStatus"): a setup object without a
# recycle bin, which Bulk API query jobs refuse (POST jobs/query answers 400 INVALIDENTITY "Entity 'CaseStatus' is
# not supported by the Bulk API.", as tap-salesforce's and Airbyte's lists of such objects have it); REST reads it.
CASE_STATUS = _lacking(
    "CaseStatus",
    "01J",
    id_field()
    + deleted_field()
    + (
        Field("MasterLabel", "string", length=255, label="Master Label"),
        Field("ApiName", "string", length=255, label="Api Name"),
        Field("SortOrder", "int", label="Sort Order"),
        Field("IsDefault", "boolean", nillable=False, default=0, label="Is Default"),
        Field("IsClosed", "boolean", nillable=False, default=0, label="Closed"),
    )
    + audit_fields(owner=False),
    ("IsDeleted",),
    bulk=False,
)

STANDARD_OBJECTS: tuple[SObject, ...] = (
    ACCOUNT,
    CONTACT,
    OPPORTUNITY,
    LEAD,
    CASE,
    USER,
    ACCOUNT_HISTORY,
    ACCOUNT_SHARE,
    USER_ROLE,
    ATTACHMENT,
    CASE_STATUS,
)


def org_objects(person_accounts: bool) -> tuple[SObject, ...]:
    """The standard objects of an org with Person Accounts enabled or without."""
    if person_accounts:
        return STANDARD_OBJECTS
    return tuple(BUSINESS_ACCOUNT if o is ACCOUNT else o for o in STANDARD_OBJECTS)


# Every object the emulator knows: the standard ones, and the generated custom objects registered so far (an org
# has tables for the standard ones and for the custom objects it was built with: Store.objects).
OBJECTS: dict[str, SObject] = {o.name: o for o in STANDARD_OBJECTS}
_LOWER = {name.lower(): obj for name, obj in OBJECTS.items()}
BY_PREFIX = {o.key_prefix: o for o in OBJECTS.values()}


def get_object(name: str) -> SObject | None:
    return _LOWER.get(name.lower())


def register(obj: SObject) -> SObject:
    """Make `obj` known to every API (idempotent for the same object)."""
    OBJECTS.setdefault(obj.name, obj)
    _LOWER.setdefault(obj.name.lower(), obj)
    BY_PREFIX.setdefault(obj.key_prefix, obj)
    return OBJECTS[obj.name]


def register_custom_objects(count: int) -> list[SObject]:
    """Make the generated custom objects ``Thing_001__c`` .. ``Thing_<count>__c`` known (custom_objects.py);
    idempotent: object n is always the same. Returns them in number order."""
    from salesforce_emulator.custom_objects import custom_object

    return [register(custom_object(number)) for number in range(1, count + 1)]


def no_related(object_name: str, record_id: str | None) -> dict[str, Any] | None:
    raise RuntimeError("a cross-object formula needs a lookup of related records (derived_value's `related`)")


def derived_value(obj: SObject, fld: Field, row: dict[str, Any], related: Related = no_related) -> Any:
    """Value of a field that is not stored: a formula (`related` looks up the other records a cross-object formula
    reads), or a compound parent built from its components."""
    if fld.calculated:
        return obj.formulas[fld.name](row, related)
    comps = obj.components(fld.name)
    if fld.type == "address":
        values = {_lower_first(c.key or c.name): row.get(c.name) for c in comps}
        return None if all(v is None for v in values.values()) else values
    parts = [row.get("FirstName"), row.get("LastName")]
    return " ".join(p for p in parts if p) or None


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
