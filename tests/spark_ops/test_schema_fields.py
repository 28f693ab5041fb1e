"""object_schema.describe: which describe() fields become replica columns (docs/design/contract.md §8), for the fields a
real org has that change events never carry."""

from __future__ import annotations

import pyarrow as pa
import pytest

from object_schema.describe import ObjectSchema
from salesforce_emulator.schema import BUSINESS_ACCOUNT

# As a real org's describe() gives them (read-only, not calculated): values derived from other records, and the
# reading user's own.
DERIVED = {"LastActivityDate": "date", "PhotoUrl": "url"}
READER = {"LastViewedDate": "datetime", "LastReferencedDate": "datetime"}


def _field(name: str, sf_type: str) -> dict:
    return {
        "name": name,
        "type": sf_type,
        "calculated": False,
        "createable": False,
        "updateable": False,
        "nillable": True,
        "compoundFieldName": None,
        "extraTypeInfo": "imageurl" if name == "PhotoUrl" else None,
    }


@pytest.fixture(scope="module")
def account() -> ObjectSchema:
    described = BUSINESS_ACCOUNT.describe()
    described["fields"] += [_field(n, t) for n, t in {**DERIVED, **READER}.items()]
    return ObjectSchema.from_describe(described)


def test_fields_salesforce_changes_without_an_event_are_no_cdc_columns(account):
    """A CDC column that no event ever updates goes stale between resyncs: none of them is one, none is asked of
    the org with the CDC columns, and an event naming one triggers no describe refresh."""
    for name in [*DERIVED, *READER]:
        assert name not in account.column_names and name not in account.org_fields, name
        assert account.knows(name), name
    assert "Name" in account.column_names and "SystemModstamp" in account.org_fields


def test_derived_fields_are_read_with_the_formula_fields_and_the_readers_own_never(account):
    """`formulas:` refreshes LastActivityDate and PhotoUrl with the formula fields; LastViewedDate and
    LastReferencedDate (the integration user's own views) are never columns."""
    refreshed = account.with_formulas()
    assert set(DERIVED) <= set(refreshed.formula_names) and not set(READER) & set(refreshed.formula_names)
    assert {"Account_Score__c", "Revenue_Band__c"} <= set(refreshed.formula_names)
    table = refreshed.table_arrow_schema()
    assert (table.field("LastActivityDate").type, table.field("PhotoUrl").type) == (pa.date32(), pa.string())
    assert account.with_formulas(["PhotoUrl"]).formula_names == ["PhotoUrl"]
    with pytest.raises(ValueError, match="derived fields"):
        account.with_formulas(["LastViewedDate"])
    assert account.formula_names == []  # formulas off (the default): no such column at all


def test_a_field_whose_name_or_compound_parent_is_no_api_name_is_no_column_and_ignored_in_events():
    described = BUSINESS_ACCOUNT.describe()
    described["fields"] += [
        _field("Evil,Name", "string"),
        _field("Id) OR (true", "string"),
        {**_field("Street__c", "string"), "compoundFieldName": "Home Address"},
    ]
    schema = ObjectSchema.from_describe(described)
    assert schema.unnamed == ("Evil,Name", "Id) OR (true", "Street__c")
    assert not {"Evil,Name", "Id) OR (true", "Street__c"} & {*schema.org_fields, *schema.compound}
    assert all(schema.knows(n) for n in schema.unnamed)  # an event naming one asks no describe() again
    stats = schema.table_properties()["delta.dataSkippingStatsColumns"].split(",")
    assert set(stats) <= {f.name for f in schema.spark_schema().fields}
