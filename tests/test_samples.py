"""The golden sample (samples/basic/) is what this project's Salesforce emulator sends and describes.

The sample's events and describe files were written by hand, to cover every case in a few lines. These tests tie
them to the emulator, which follows Salesforce's documentation: each event line is exactly the event the emulator
publishes for the same change, and each described field says what the emulator's describe() says about it. So a
sample line cannot drift into a shape no org sends, and an emulator change that alters a shape the sample relies on
shows here. The expected state is checked elsewhere, twice: through the platform (tests/cdc_assets/test_golden.py)
and through an independent fold in plain Python (tests/cdc_assets/test_property.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from settings import SAMPLE

from salesforce_emulator.cdc import change_event, gap_event
from salesforce_emulator.changes import Change, CommittedTransaction
from salesforce_emulator.schema import OBJECTS
from salesforce_emulator.testing import body, header

NOT_JSON_LINE = 7  # the sample's one bad line, quarantined by the platform

# describe() attributes the platform reads; `filterable` is not one of them (the emulator says false for every
# compound parent, the sample true for Contact's Name).
DESCRIBED = ("type", "nillable", "compoundFieldName", "calculated", "length")


def _sample_events() -> list[tuple[int, dict[str, Any]]]:
    lines = (SAMPLE / "events.jsonl").read_text(encoding="utf-8").split("\n")
    return [(n, json.loads(line)) for n, line in enumerate(lines, start=1) if line and n != NOT_JSON_LINE]


def _flattened(entity: str, values: dict[str, Any]) -> dict[str, Any]:
    """An event body with compound values nested (`BillingAddress: {City: ...}`) as the org's field names."""
    obj = OBJECTS[entity]
    flat = {}
    for name, value in values.items():
        if isinstance(value, dict):
            by_key = {f.key or f.name: f.name for f in obj.components(name)}
            flat |= {by_key[key]: component for key, component in value.items()}
        else:
            flat[name] = value
    return flat


def _emulated(event: dict[str, Any]) -> dict[str, Any]:
    """The event the emulator publishes for the change `event` describes."""
    h = header(event)
    txn = CommittedTransaction(
        h["transactionKey"], h["commitTimestamp"], h["commitNumber"], h["commitUser"], h["changeOrigin"], []
    )
    kind = h["changeType"]
    change = Change(
        h["entityName"],
        kind.removeprefix("GAP_") if kind != "GAP_OVERFLOW" else "UPDATE",
        list(h["recordIds"]),
        _flattened(h["entityName"], body(event)),
        replay_id=event["data"]["event"]["replayId"],
    )
    if kind.startswith("GAP_"):
        return gap_event(txn, change, h["sequenceNumber"], overflow=kind == "GAP_OVERFLOW")
    return change_event(txn, change, h["sequenceNumber"])


def _comparable(event: dict[str, Any]) -> dict[str, Any]:
    """The event without what may differ and means nothing to a subscriber: the schema id (an opaque hash of the
    field list, `schema-Account` in the sample) and the order of the header's field-name lists."""
    event = json.loads(json.dumps(event))
    event["data"]["schema"] = None
    h = header(event)
    for names in ("changedFields", "nulledFields", "diffFields"):
        h[names] = sorted(h[names])
    return event


def test_the_sample_has_every_case_its_readme_lists():
    kinds = [header(event)["changeType"] for _, event in _sample_events()]
    assert {"CREATE", "UPDATE", "DELETE", "UNDELETE", "GAP_UPDATE", "GAP_OVERFLOW"} <= set(kinds)
    lines = (SAMPLE / "events.jsonl").read_text(encoding="utf-8").split("\n")
    assert lines[3] == lines[2]  # line 4 repeats line 3: delivered twice
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[NOT_JSON_LINE - 1])


@pytest.mark.parametrize("number,event", _sample_events(), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_each_sample_line_is_the_event_the_emulator_publishes(number, event):
    assert _comparable(_emulated(event)) == _comparable(event), f"samples/basic/events.jsonl line {number}"


@pytest.mark.parametrize("name", ["Account", "Contact", "Opportunity"])
def test_sample_describe_agrees_with_the_emulators_describe(name):
    sample = json.loads((SAMPLE / "describe" / f"{name}.json").read_text())
    emulator = {f["name"]: f for f in OBJECTS[name].describe()["fields"]}
    assert sample["name"] == name
    for field in sample["fields"]:
        assert field["name"] in emulator, f"{name}.{field['name']} is not a field of the emulator's {name}"
        want = {k: field.get(k) for k in DESCRIBED}
        assert want == {k: emulator[field["name"]].get(k) for k in DESCRIBED}, f"{name}.{field['name']}"


def test_the_sample_describes_one_formula_field_a_replica_leaves_out():
    account = json.loads((SAMPLE / "describe" / "Account.json").read_text())
    assert [f["name"] for f in account["fields"] if f["calculated"]] == ["Account_Score__c"]
