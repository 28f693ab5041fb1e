"""The ``ChangeEventHeader`` of an event, checked before the subscriber acts on it or lands it.

Decoding proves the bytes match the schema, not that the header makes sense: a ``commitTimestamp`` in microseconds
or nanoseconds names a year the landing file's hour folder cannot be made for (so the same event failed the stream
at every retry), and an ``entityName`` that is not an API name would be asked of describe() and reach the
platform's partition paths. An event whose header fails these checks becomes a dead letter (``dead_letters.py``):
its record ids are reconciled, or its entity resynced, and the stream goes on.

The checks: every field the platform relies on is present with its type; ``entityName`` is a Salesforce API name
(``shared/names.py``, the rule the parse and the config apply too); ``commitTimestamp`` lies between
:data:`EARLIEST_COMMIT_MS` and a day after this machine's clock (``shared/commit_time.py``, the bound the parse
applies too); ``recordIds`` are strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.commit_time import LATEST_COMMIT_RULE, latest_commit_ms
from shared.names import API_NAME_RULE, is_api_name

EARLIEST_COMMIT_MS = 946_684_800_000  # 2000-01-01T00:00:00Z: before any org sent a change event
FIELD_TYPES: dict[str, type] = {
    "entityName": str,
    "recordIds": list,
    "changeType": str,
    "transactionKey": str,
    "sequenceNumber": int,
    "commitTimestamp": int,
    "commitNumber": int,
}
SHOWN_CHARS = 40


class InvalidHeader(ValueError):
    """The header decoded but cannot be landed as it is (the message names each field and why)."""


def plausible_commit_ts(value: object, now_ms: int | None = None) -> bool:
    """True for epoch milliseconds between 2000 and a day from now (not micro- or nanoseconds, not null)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and EARLIEST_COMMIT_MS <= value <= latest_commit_ms(now_ms)
    )


def header_problems(header: Mapping[str, Any], now_ms: int | None = None) -> dict[str, str]:
    """{field: what is wrong with it} of a decoded header; empty when it can be landed."""
    problems = {
        name: f"missing or not of type {kind.__name__} ({_shown(header.get(name))})"
        for name, kind in FIELD_TYPES.items()
        if not isinstance(header.get(name), kind) or isinstance(header.get(name), bool)
    }
    if "entityName" not in problems and not is_api_name(header["entityName"]):
        problems["entityName"] = f"not an object name ({API_NAME_RULE}): {_shown(header['entityName'])}"
    if "commitTimestamp" not in problems and not plausible_commit_ts(header["commitTimestamp"], now_ms):
        problems["commitTimestamp"] = (
            f"{header['commitTimestamp']} is not epoch milliseconds from 2000, {LATEST_COMMIT_RULE} (microseconds or "
            "nanoseconds?)"
        )
    if "recordIds" not in problems and not all(isinstance(i, str) for i in header["recordIds"]):
        problems["recordIds"] = "not a list of strings"
    return problems


def check_header(header: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidHeader` naming every problem of ``header``."""
    if problems := header_problems(header):
        raise InvalidHeader("; ".join(f"{name} {why}" for name, why in problems.items()))


def _shown(value: object) -> str:
    """A value as text for a reason or a log line: quoted (control characters escaped) and cut short."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"
