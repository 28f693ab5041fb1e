"""Field values: one storage form, three wire forms.

SQLite holds datetimes as fixed-width UTC strings ``2025-11-22T08:26:40.000Z`` (so string comparison is time
comparison), dates as ``2025-11-22``, times of day (``time`` fields) as ``08:26:40.000Z``, booleans as 0/1, numbers
as numbers, a binary (``base64``) value as its base64 text. Each API renders them the way Salesforce does: REST JSON
datetimes end in ``+0000``, CDC events and Bulk CSV end in ``Z``; a time is ``HH:MM:SS.sssZ`` in REST, Bulk CSV and
CometD events alike (the Pub/Sub API sends it as milliseconds since midnight, ``pubsub_avro``).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from typing import Any

_DATETIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?\s*(Z|[+-]\d{2}:?\d{2})?$"
)
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME_RE = re.compile(r"^(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?Z?$")
MS_PER_DAY = 86_400_000

TEXT_TYPES = {
    "id",
    "reference",
    "string",
    "picklist",
    "multipicklist",
    "textarea",
    "email",
    "phone",
    "url",
    "combobox",
    "encryptedstring",
    "anyType",  # anyType (history OldValue/NewValue): kept as text
}
FLOAT_TYPES = {"double", "currency", "percent"}


class InvalidFieldValue(ValueError):
    """A value that does not fit its field's type (becomes a 400 on the API)."""


def ms_to_iso(ms: int) -> str:
    """Epoch milliseconds to the storage / CDC datetime form."""
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def iso_to_ms(value: str) -> int:
    return int(parse_datetime(value).timestamp() * 1000 + 0.5)


def parse_datetime(value: str) -> dt.datetime:
    match = _DATETIME_RE.match(value.strip())
    if not match:
        raise InvalidFieldValue(f"'{value}' is not a valid datetime (use 2025-11-22T08:26:40.000Z)")
    year, month, day, hour, minute, second, frac, tz = match.groups()
    micros = int((frac or "0").ljust(6, "0")[:6])
    stamp = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros)
    if tz in (None, "Z"):
        return stamp.replace(tzinfo=dt.UTC)
    sign = 1 if tz[0] == "+" else -1
    digits = tz[1:].replace(":", "")
    offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return (stamp - sign * offset).replace(tzinfo=dt.UTC)


def canonical_datetime(value: str) -> str:
    stamp = parse_datetime(value)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def canonical_time(value: str) -> str:
    """A time of day as Salesforce returns it: ``HH:MM:SS.sssZ`` (from ``HH:MM``, ``HH:MM:SS``, with or without
    milliseconds and ``Z``)."""
    match = _TIME_RE.match(value.strip())
    if not match or int(match[1]) > 23 or int(match[2]) > 59 or int(match[3] or 0) > 59:
        raise InvalidFieldValue(f"'{value}' is not a valid time (use 08:26:40.000Z)")
    hour, minute, second, frac = match.groups()
    return f"{hour}:{minute}:{second or '00'}.{(frac or '0').ljust(3, '0')}Z"


def time_to_ms(value: str) -> int:
    """``HH:MM:SS.sssZ`` -> milliseconds since midnight (the Pub/Sub API's ``Data:TimeOnly`` long)."""
    hour, minute, rest = value.rstrip("Z").split(":")
    return (int(hour) * 3600 + int(minute) * 60) * 1000 + round(float(rest) * 1000)


def ms_to_time(ms: int) -> str:
    """Milliseconds since midnight -> ``HH:MM:SS.sssZ``."""
    seconds, millis = divmod(ms % MS_PER_DAY, 1000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{millis:03d}Z"


def to_storage(ftype: str, value: Any, field: str = "") -> Any:
    """Validate an API input value for a field of type ``ftype`` and return its storage form."""
    if value is None or value == "":
        return None
    try:
        if ftype in TEXT_TYPES:
            if isinstance(value, (dict, list)):
                raise InvalidFieldValue(f"{field}: expected a string")
            return str(value) if not isinstance(value, bool) else ("true" if value else "false")
        if ftype == "boolean":
            if isinstance(value, bool):
                return int(value)
            if str(value).lower() in ("true", "false", "1", "0"):
                return int(str(value).lower() in ("true", "1"))
            raise InvalidFieldValue(f"{field}: '{value}' is not a boolean")
        if ftype == "int":
            if isinstance(value, bool):
                raise InvalidFieldValue(f"{field}: expected an integer")
            number = float(value)
            if number != int(number):
                raise InvalidFieldValue(f"{field}: '{value}' is not an integer")
            return int(number)
        if ftype in FLOAT_TYPES:
            if isinstance(value, bool):
                raise InvalidFieldValue(f"{field}: expected a number")
            return float(value)
        if ftype == "date":
            text = str(value)[:10]
            if not _DATE_RE.match(text):
                raise InvalidFieldValue(f"{field}: '{value}' is not a date (use 2025-11-22)")
            dt.date.fromisoformat(text)
            return text
        if ftype == "datetime":
            return canonical_datetime(str(value))
        if ftype == "time":
            return canonical_time(str(value))
        if ftype == "base64":  # stored as sent; REST reads give its URL (api_rest.render_record), Bulk refuses it
            base64.b64decode(str(value), validate=True)
            return str(value)
    except (TypeError, ValueError) as exc:  # binascii.Error, a bad base64 value, is a ValueError
        if isinstance(exc, InvalidFieldValue):
            raise
        raise InvalidFieldValue(f"{field}: '{value}' is not a valid {ftype}") from exc
    raise InvalidFieldValue(f"{field}: fields of type {ftype} cannot be set")


def to_rest(ftype: str, value: Any) -> Any:
    """Storage form to REST JSON form."""
    if value is None:
        return None
    if ftype == "boolean":
        return bool(value)
    if ftype == "datetime":
        return value[:-1] + "+0000"
    if ftype in FLOAT_TYPES:
        return float(value)
    return value


def to_event(ftype: str, value: Any) -> Any:
    """Storage form to CDC event form."""
    if value is None:
        return None
    if ftype == "boolean":
        return bool(value)
    if ftype in FLOAT_TYPES:
        return float(value)
    return value


def to_csv(ftype: str, value: Any) -> str | None:
    """Storage form to a Bulk API CSV cell (None is an empty, unquoted cell)."""
    if value is None:
        return None
    if ftype == "boolean":
        return "true" if value else "false"
    if ftype in FLOAT_TYPES:
        return repr(float(value))
    return str(value)
