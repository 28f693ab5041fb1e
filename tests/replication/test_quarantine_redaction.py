"""`redact_quarantine`: a quarantined line keeps no hashed or left-out value of its object.

`_quarantine.raw` is the line as landed; with the option on, `redacted` rewrites the payload of a CometD or
Datastream line of a protected object, replaces a line that is not JSON whole (it cannot tell whose it is), and
leaves the lines of objects that are not replicated, and every line when no object asks for it, as they are.
"""

from __future__ import annotations

import json

import pyarrow as pa
from settings import SAMPLE

from object_schema.describe import ObjectSchema
from replication.quarantine import REDACTED, REDACTED_LINE, redacted
from salesforce_emulator.landing_lines import event

ACCOUNT = json.loads((SAMPLE / "describe" / "Account.json").read_text())
ID = "001000000000001AAA"


def _schemas(redact: bool) -> dict[str, ObjectSchema]:
    schema = ObjectSchema.from_describe(
        ACCOUNT, exclude=["Description", "BillingCity"], hashed=["Name"], redact_quarantine=redact
    )
    return {"Account": schema}


def _entries(*lines: str) -> pa.Table:
    return pa.table(
        {
            "source_file": ["f.jsonl"] * len(lines),
            "source_line": list(range(1, len(lines) + 1)),
            "raw": list(lines),
            "reason": ["bad"] * len(lines),
        }
    )


def test_a_cometd_line_loses_its_hashed_and_left_out_values():
    line = event(
        "Account",
        "UPDATE",
        [ID],
        1,
        Name="Secret Corp",
        Description="private",
        Industry="Energy",
        BillingAddress={"City": "Hidden Town", "State": "IL"},
    )
    raw = redacted(_entries(line), _schemas(True))["raw"][0].as_py()
    payload = json.loads(raw)["data"]["payload"]
    assert payload["Name"] == REDACTED and payload["Description"] == REDACTED
    assert payload["BillingAddress"] == {"City": REDACTED, "State": "IL"} and payload["Industry"] == "Energy"
    assert payload["ChangeEventHeader"]["recordIds"] == [ID]
    assert "Secret Corp" not in raw and "Hidden Town" not in raw


def test_a_datastream_line_loses_them_too():
    line = json.dumps(
        {
            "uuid": "u",
            "read_method": "salesforce-cdc",
            "object": "Account",
            "source_metadata": {"object_name": "Account"},
            "payload": {"Id": ID, "Name": "Secret Corp"},
        }
    )
    assert "Secret Corp" not in redacted(_entries(line), _schemas(True))["raw"][0].as_py()


def test_a_line_that_is_not_json_is_replaced_whole_and_foreign_objects_stay():
    foreign = event("Opportunity", "UPDATE", ["006000000000001AAA"], 1, Name="Deal")
    raws = redacted(_entries("{not json Secret Corp", foreign), _schemas(True))["raw"].to_pylist()
    assert raws == [REDACTED_LINE, foreign]


def test_without_the_option_lines_stay_as_landed():
    line = event("Account", "UPDATE", [ID], 1, Name="Secret Corp")
    assert redacted(_entries(line, "{bad"), _schemas(False))["raw"].to_pylist() == [line, "{bad"]


def test_json_python_cannot_read_is_replaced_whole():
    """A 5,000-digit number is valid JSON that Python refuses to read (a ValueError, not a JSONDecodeError): the
    line is replaced whole, instead of failing the batch that quarantines it (every run, for ever)."""
    line = event("Account", "UPDATE", [ID], 1, Name="Secret Corp")
    huge = line.replace('"Name": "Secret Corp"', f'"Name": "Secret Corp", "Big": {"9" * 5000}')
    assert redacted(_entries(huge), _schemas(True))["raw"].to_pylist() == [REDACTED_LINE]
