"""`ApiName`: the config models' type of an object or field name (replication.yaml `name`, `fields`, `hash`,
`formulas.fields`), checked against Salesforce's API-name rule (shared/names.py, the rule the parsers apply too).

A name becomes a table folder, a Dagster asset key, a subscriber topic and a SOQL identifier: `../../etc` would name
a folder outside the warehouse, `Name FROM User --` would change a query.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from shared.names import API_NAME_RULE, is_api_name


def check_api_name(name: str) -> str:
    """`name` if Salesforce could call an object or a field so, else ValueError saying the rule."""
    if not is_api_name(name):
        raise ValueError(f"not an object or field name: {API_NAME_RULE}")
    return name


ApiName = Annotated[str, AfterValidator(check_api_name)]
