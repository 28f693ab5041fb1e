"""Salesforce's names, written once: object API names and record ids, each as a Python regex (the config model, the
subscriber, the reconcile) and as the same rule in Spark SQL's regex dialect, Java's (the parsers' `RLIKE`).

**Anchors.** Both dialects' `$` also match *before* a final line terminator, so `^[A-Za-z0-9]{15}$` accepts
`"001000000000001\\n"`: such an id would become a replica row, and the org would refuse it (MALFORMED_ID) in every
reconcile of its object. The SQL forms are anchored `\\A...\\z` (Java's absolute start and end; its `\\Z` still
allows a final line terminator), the Python ones `\\A...\\Z` (Python's `\\Z` is the absolute end) and used with
`fullmatch`.

**API names** (`API_NAME`): what Salesforce allows for an object name, as its object reference states it for the
developer name of a component: it begins with a letter, holds only letters, digits and underscores, does not end with
an underscore and has no two consecutive underscores. A full API name joins up to three such parts with `__`: a
namespace prefix, the name, a suffix (`Account`, `Invoice__c`, `ns__Invoice__c`, `Alert__e`,
`ns__Invoice__ChangeEvent`, `Obj__Share`). At most `API_NAME_MAX` characters: a 15-character namespace, a 40-character
name and the longest suffix fit well within it; a name beyond it (a partition folder `entity=<name>` of
change_events) is never a Salesforce object.

**Record ids** (`RECORD_ID`): 15 or 18 ASCII letters and digits. Whether an 18-character id's case-safe suffix is
right, and whether the id names a record, only the org knows: it refuses a malformed id (MALFORMED_ID), and the
reconcile isolates such ids (`resources/salesforce.py`). `WILDCARD_ID`: a key prefix and `*`, Salesforce's "some
records of this entity" (docs/design/contract.md §3). `OVERFLOW_ID`: the dummy record id of a GAP_OVERFLOW event.
"""

from __future__ import annotations

import re

API_NAME_MAX = 80
OVERFLOW_ID = "000000000000000AAA"

_END = "<end>"  # where a lookahead needs the dialect's absolute end
_PART = r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*"  # a letter first, single underscores between, none last
_API_NAME = rf"(?=.{{1,{API_NAME_MAX}}}{_END}){_PART}(?:__{_PART}){{0,2}}"
_RECORD_ID = r"[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?"
_WILDCARD_ID = r"[A-Za-z0-9]{3,17}\*"


def _python(body: str) -> re.Pattern[str]:
    return re.compile(r"\A(?:" + body.replace(_END, r"\Z") + r")\Z")


def _sql(body: str) -> str:
    return r"\A(?:" + body.replace(_END, r"\z") + r")\z"


API_NAME, API_NAME_SQL = _python(_API_NAME), _sql(_API_NAME)
RECORD_ID, RECORD_ID_SQL = _python(_RECORD_ID), _sql(_RECORD_ID)
WILDCARD_ID_SQL = _sql(_WILDCARD_ID)

API_NAME_RULE = (
    f"a letter first, then letters, digits and single underscores, up to three parts joined by '__' "
    f"(Account, Invoice__c, ns__Invoice__c), at most {API_NAME_MAX} characters"
)


def is_api_name(name: object) -> bool:
    """`name` is a Salesforce object API name (module docstring)."""
    return isinstance(name, str) and API_NAME.fullmatch(name) is not None


def is_record_id(record_id: object) -> bool:
    """`record_id` has the form of a Salesforce record id: 15 or 18 ASCII letters and digits, nothing else."""
    return isinstance(record_id, str) and RECORD_ID.fullmatch(record_id) is not None
