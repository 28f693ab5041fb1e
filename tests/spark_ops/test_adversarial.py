"""Adversarial lines (hypothesis): whatever lands, parsing never crashes, every line is either quarantined with a
reason or becomes change rows, and nothing else happens to it (docs/design/contract.md §9)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from object_schema.describe import ObjectSchema
from salesforce_emulator.landing_lines import event
from spark_ops.parse import parse_lines, quarantined, to_change_rows

GOOD = json.loads(event("Account", "UPDATE", ["001000000000001AAA"], 1_763_800_000_000, Name="Acme"))
HEADER_KEYS = list(GOOD["data"]["payload"]["ChangeEventHeader"])
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)
nasty_ids = st.sampled_from(
    [
        "001' OR '1'='1",
        '001000000000001AA"',
        "../../etc/passwd",
        "",
        "001*",
        "x" * 200,
        "001000000000001AAA; DROP TABLE",
    ]
)


@st.composite
def adversarial_line(draw) -> str:
    line = json.loads(json.dumps(GOOD))
    header = line["data"]["payload"]["ChangeEventHeader"]
    kind = draw(
        st.sampled_from(
            [
                "drop_header_key",
                "wrong_type",
                "bad_id",
                "unknown_type",
                "unknown_entity",
                "field_value",
                "raw_text",
                "truncate",
            ]
        )
    )
    if kind == "drop_header_key":
        header.pop(draw(st.sampled_from(HEADER_KEYS)))
    elif kind == "wrong_type":
        header[draw(st.sampled_from(HEADER_KEYS))] = draw(json_values)
    elif kind == "bad_id":
        header["recordIds"] = [draw(nasty_ids)]
    elif kind == "unknown_type":
        header["changeType"] = draw(st.text(max_size=12))
    elif kind == "unknown_entity":
        header["entityName"] = draw(st.text(min_size=1, max_size=12))
    elif kind == "field_value":
        line["data"]["payload"][
            draw(st.sampled_from(["NumberOfEmployees", "CreatedDate", "AnnualRevenue", "BillingAddress", "Name"]))
        ] = draw(json_values)
    elif kind == "raw_text":
        return draw(st.text(max_size=60))
    text = json.dumps(line)
    return text[: draw(st.integers(1, len(text)))] if kind == "truncate" else text


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(lines=st.lists(adversarial_line(), min_size=20, max_size=40))
def test_every_adversarial_line_is_accounted_for(spark, sample_dir, lines):
    schemas = {
        "Account": ObjectSchema.from_describe(json.loads((sample_dir / "describe" / "Account.json").read_text()))
    }
    rows = [("f.jsonl", i + 1, line) for i, line in enumerate(lines) if line.strip()]
    df = spark.createDataFrame(rows, "source_file string, source_line long, raw string")
    parsed = parse_lines(df, schemas).cache()
    bad = {r.source_line: r.reason for r in quarantined(parsed).collect()}
    changes = to_change_rows(parsed).collect()
    good_lines = {r.source_line for r in changes}
    assert all(bad.values()), "every quarantined line has a reason"
    for r in changes:
        if r.source_line in bad:  # a value did not fit: the line's records become dirty, nothing of it applies
            assert r.change_type.startswith("GAP_") and not r.fields and not r.set_fields, r
    assert set(bad) | good_lines == {n for _, n, _ in rows}, "every line is accounted for"
    for r in changes:
        assert r.record_id.isalnum() or r.record_id.endswith("*"), f"unsafe id reached change rows: {r.record_id}"
