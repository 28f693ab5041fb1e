"""The Pub/Sub API's field bitmaps: ``changedFields``, ``nulledFields`` and ``diffFields`` of a change event.

Over gRPC a change event carries every field of its entity's Avro schema (unchanged ones null), and the header
says which fields an UPDATE really set with a list of hex strings instead of field names:

- the first element, ``"0x..."``, has bit *i* set when top-level field *i* of the schema is named
  (``ChangeEventHeader`` is field 0);
- each compound field with named components adds ``"{pos}-0x..."``: ``pos`` is the compound's top-level position,
  the bitmap indexes the fields of its nested record. A compound's own top-level bit without a nested element
  names all of its components (Salesforce does this when every component was nulled).
- a *union* of a value and a record (a person-account org's ``Account.Name``: ``["null", "string",
  Switchable_PersonName]``) is named by its top-level bit itself (``Name``: a business account's text), and its
  components by a nested element (``Name.LastName``: a person account's), as both of Salesforce's decoders read
  them. (The decoders differ on a nested element naming every component of a compound: the Java one names the
  compound, the Python one each component; we follow the Python one.)

Bit *i* is bit *i* of the hex number (least significant first), as in Salesforce's reference decoder
(``ChangeEventHeaderUtility.process_bitmap``). Names come out as the Streaming API (CometD) spells them:
``Name``, ``BillingAddress.City``. ``encode`` is the inverse, used by the emulator's Pub/Sub server.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]  # a parsed Avro record schema (``{"type": "record", "fields": [...]}``)


def nested_record(field_type: Any, named: dict[str, Schema]) -> Schema | None:
    """The record schema of an optional compound field (``["null", {record}]`` or a named reference), or None."""
    options = field_type if isinstance(field_type, list) else [field_type]
    for option in options:
        if isinstance(option, str):
            option = named.get(option)
        if isinstance(option, dict) and option.get("type") == "record":
            return option
    return None


def switchable(field_type: Any) -> bool:
    """Whether a field's union holds a plain value besides its record (``["null", "string", {record}]``)."""
    options = field_type if isinstance(field_type, list) else [field_type]
    return any(isinstance(o, str) and o in _PRIMITIVES for o in options) and len(options) > 2


_PRIMITIVES = {"string", "int", "long", "double", "float", "boolean", "bytes"}


def named_records(schema: Schema) -> dict[str, Schema]:
    """Every named record in a schema, by short and full name (so later fields can refer to it by name)."""
    found: dict[str, Schema] = {}

    def visit(node: Any, namespace: str) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, namespace)
        elif isinstance(node, dict):
            if node.get("type") == "record":
                space = node.get("namespace", namespace)
                found[node["name"]] = node
                found[f"{space}.{node['name']}" if space else node["name"]] = node
                for fld in node.get("fields", []):
                    visit(fld["type"], space)
            elif isinstance(node.get("type"), (dict, list)):
                visit(node["type"], namespace)

    visit(schema, schema.get("namespace", ""))
    return found


def _bits(hex_text: str) -> list[int]:
    value = int(hex_text[2:] or "0", 16) if hex_text.lower().startswith("0x") else int(hex_text or "0", 16)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def decode(bitmaps: list[str] | None, schema: Schema, named: dict[str, Schema] | None = None) -> list[str]:
    """Field names (``Name``, ``BillingAddress.City``) a bitmap list names, in schema order (``named``: the
    schema's :func:`named_records`, when the caller keeps them)."""
    if not bitmaps:
        return []
    fields = schema["fields"]
    named = named if named is not None else named_records(schema)
    top: set[int] = set()
    nested: dict[int, list[int]] = {}
    for item in bitmaps:
        if not item:
            continue
        if "-" in item:
            position, _, bitmap = item.partition("-")
            nested[int(position)] = _bits(bitmap)
        else:
            top |= set(_bits(item))
    names: list[str] = []
    for pos in sorted(top | set(nested)):
        if pos >= len(fields):
            raise ValueError(f"bitmap names field {pos} but the schema has {len(fields)} fields")
        fld = fields[pos]
        record = nested_record(fld["type"], named)
        if record is None or (switchable(fld["type"]) and pos in top):
            names.append(fld["name"])
        if record is None or (switchable(fld["type"]) and pos not in nested):
            continue
        components = record["fields"]
        for index in nested.get(pos, range(len(components))):
            names.append(f"{fld['name']}.{components[index]['name']}")
    return names


def _hex(positions: list[int]) -> str:
    value = sum(1 << p for p in positions)
    digits = f"{value:X}"
    return "0x" + digits.rjust(len(digits) + len(digits) % 2, "0")


def encode(names: list[str], schema: Schema) -> list[str]:
    """The bitmap list for field names (the inverse of :func:`decode`); ``[]`` for no names."""
    if not names:
        return []
    positions = {fld["name"]: i for i, fld in enumerate(schema["fields"])}
    named = named_records(schema)
    top: list[int] = []
    nested: dict[int, list[int]] = {}
    for name in names:
        parent, dot, child = name.partition(".")
        pos = positions[parent]
        if dot:
            record = nested_record(schema["fields"][pos]["type"], named)
            assert record is not None, f"{parent} is not a compound field"
            nested.setdefault(pos, []).append([f["name"] for f in record["fields"]].index(child))
        else:
            top.append(pos)
    return [_hex(top)] + [f"{pos}-{_hex(bits)}" for pos, bits in sorted(nested.items())]
