"""The Pub/Sub API field bitmaps: Salesforce's documented encoding, both ways."""

from __future__ import annotations

from cdc_subscriber.bitmap import decode, encode

ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [{"name": n, "type": ["null", "string"]} for n in ("Street", "City", "State")],
}
SCHEMA = {
    "type": "record",
    "name": "AccountChangeEvent",
    "fields": [
        {"name": "ChangeEventHeader", "type": "string"},
        {"name": "Name", "type": ["null", "string"]},
        {"name": "Phone", "type": ["null", "string"]},
        {"name": "BillingAddress", "type": ["null", ADDRESS]},
        {"name": "ShippingAddress", "type": ["null", "Address"]},  # a named reference to the same record
        {"name": "LastModifiedDate", "type": ["null", "long"]},
    ],
}


def test_top_level_bits_name_fields_by_schema_position():
    # 0x24 = bits 2 and 5: Phone and LastModifiedDate
    assert decode(["0x24"], SCHEMA) == ["Phone", "LastModifiedDate"]


def test_nested_bitmaps_name_compound_components_through_named_references():
    assert decode(["0x02", "3-0x02", "4-0x05"], SCHEMA) == [
        "Name",
        "BillingAddress.City",
        "ShippingAddress.Street",
        "ShippingAddress.State",
    ]


def test_a_compound_bit_without_a_nested_bitmap_names_every_component():
    assert decode(["0x08"], SCHEMA) == ["BillingAddress.Street", "BillingAddress.City", "BillingAddress.State"]


def test_encode_is_the_inverse_of_decode():
    names = ["Name", "BillingAddress.City", "ShippingAddress.State", "LastModifiedDate"]
    encoded = encode(names, SCHEMA)
    assert encoded == ["0x22", "3-0x02", "4-0x04"]
    assert decode(encoded, SCHEMA) == names
    assert encode([], SCHEMA) == [] and decode([], SCHEMA) == []


PERSON_NAME = {
    "type": "record",
    "name": "Switchable_PersonName",
    "fields": [{"name": n, "type": ["null", "string"]} for n in ("Salutation", "FirstName", "LastName")],
}
UNION_SCHEMA = {
    "type": "record",
    "name": "AccountChangeEvent",
    "fields": [
        {"name": "ChangeEventHeader", "type": "string"},
        {"name": "Name", "type": ["null", "string", PERSON_NAME], "doc": "Data:Switchable_PersonName"},
        {"name": "Phone", "type": ["null", "string"]},
    ],
}


def test_a_top_level_bit_on_a_union_field_names_the_field_itself():
    # a business account's Name (the union's string): "Name", not every component of the union's record
    assert decode(["0x02"], UNION_SCHEMA) == ["Name"]
    assert encode(["Name", "Phone"], UNION_SCHEMA) == ["0x06"]


def test_a_nested_bitmap_on_a_union_field_names_the_person_name_components():
    assert decode(["0x04", "1-0x06"], UNION_SCHEMA) == ["Name.FirstName", "Name.LastName", "Phone"]
    assert encode(["Name.FirstName", "Name.LastName", "Phone"], UNION_SCHEMA) == ["0x04", "1-0x06"]
