"""The `formulas:` section of replication.yaml: durations, defaults under `options` overridden per object, the
formula columns a schema keeps, and names that are no formula field."""

from __future__ import annotations

from pathlib import Path

import pytest

from object_schema.describe import FORMULAS_AT
from replication.config import ConfigError, parse_config
from salesforce_emulator.schema import CONTACT

YAML = """
options:
  formulas: {refresh_every: 15m, overlap: 30}
objects:
  - name: Contact
    formulas: {full_every: 1d}
  - name: Account
    formulas: false
  - Opportunity
"""


def test_formulas_section_inherits_from_options_key_by_key_and_takes_durations():
    objects = {o.name: o for o in parse_config(YAML, Path("replication.yaml")).objects}
    contact = objects["Contact"].formulas
    assert (contact.refresh_every, contact.full_every, contact.overlap) == (900.0, 86400.0, 30.0)
    assert contact.max_age == 2 * 86400  # values wait up to a full-pass interval: twice that is stale
    assert objects["Account"].formulas is None
    assert objects["Opportunity"].formulas.full_every is None and objects["Opportunity"].formulas.max_age == 1800


def test_a_schema_keeps_formula_columns_apart_from_the_cdc_columns():
    contact = parse_config(YAML, Path("replication.yaml")).objects[0]
    schema = contact.schema_of(CONTACT.describe())
    assert schema.formula_names == ["Account_Industry__c", "Account_Revenue__c"]
    assert not set(schema.formula_names) & set(schema.arrow_schema().names)  # no CDC writer writes them
    assert schema.table_arrow_schema().names[-3:] == [*schema.formula_names, FORMULAS_AT]


def test_formula_fields_that_describe_does_not_list_are_an_error():
    config = parse_config(
        YAML.replace("{full_every: 1d}", "{fields: [Account_Industry__c, Title]}"), Path("replication.yaml")
    )
    with pytest.raises(ConfigError, match="Title"):
        config.objects[0].schema_of(CONTACT.describe())
    with pytest.raises(ConfigError, match="refresh_every"):
        parse_config(YAML.replace("15m", "soon"), Path("replication.yaml"))
