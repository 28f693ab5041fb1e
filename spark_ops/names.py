"""Salesforce API names (objects and fields): the one rule every reader of a name from outside applies.

A name from replication.yaml or from a landing line becomes a table folder, a partition value, a Dagster asset key
and a SOQL identifier, so only what Salesforce itself can call an object or a field passes:

- parts separated by a double underscore, at most four: `Account`, `Invoice__c`, `ns__Invoice__c`,
  `Location__Latitude__s`, `ns__Location__Latitude__s`, `Invoice__ChangeEvent`, `Alert__e`, `Name__pc`;
- each part starts with a letter and holds letters, digits and single underscores, never at its end (Salesforce:
  a developer name "must begin with a letter, can contain only underscores and alphanumeric characters, can't end
  with an underscore, can't contain 2 consecutive underscores"; a namespace prefix is such a name too);
- at most 80 characters in all (a developer name has at most 40, a namespace 15, plus the separators and the
  suffix: 80 bounds every name Salesforce makes, and the length of a path built from one).

`API_NAME_SQL` is the same rule for Spark's `RLIKE` (Java regex): anchored with `\\A`/`\\z`, because Java's `$`
also matches before a final line terminator (`"Account\\n"` would pass).
"""

from __future__ import annotations

import re

MAX_API_NAME = 80
_PART = r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*"
_BODY = rf"{_PART}(?:__{_PART}){{0,3}}"
API_NAME = re.compile(_BODY)  # use with fullmatch, and the length
API_NAME_SQL = rf"\A(?=[A-Za-z0-9_]{{1,{MAX_API_NAME}}}\z){_BODY}\z"
API_NAME_RULE = (f"a Salesforce API name starts with a letter, holds only letters, digits and single underscores "
                 f"(a double underscore only after a namespace or before a suffix such as __c), does not end with an "
                 f"underscore and has at most {MAX_API_NAME} characters (e.g. Account, Invoice__c, ns__Invoice__c)")


def is_api_name(name: object) -> bool:
    """`name` is a text Salesforce could call an object or a field (module docstring)."""
    return isinstance(name, str) and len(name) <= MAX_API_NAME and API_NAME.fullmatch(name) is not None


def check_api_name(name: str) -> str:
    """`name` if it is an API name, else ValueError saying the rule."""
    if not is_api_name(name):
        raise ValueError(f"not an object or field name: {API_NAME_RULE}")
    return name
