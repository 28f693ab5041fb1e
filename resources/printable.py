"""Text from outside (landing file names, entity and field names, reasons quoting landed values, stream status the
subscriber writes) made safe to put in a log line or in Dagster metadata.

Anyone who can write the landing zone chooses that text. Raw, a newline in a file or entity name starts a log line
of the writer's choosing (`\\n2026-01-01 INFO ...` forges an entry), a bidi override makes a name read differently
from what it is, and a reason that quotes a value copies the org's data (an e-mail address, a phone number) into
logs and the UI, where whoever may read the logs reads it. So:

- `printable` escapes every character that moves the cursor or changes how the rest reads: C0 and C1 controls,
  DEL, the line and paragraph separators U+2028/U+2029, bidi marks, embeddings, overrides and isolates, zero-width
  and other invisible format characters, lone surrogates; a backslash is doubled, so an escape cannot be forged
  either. It caps the length (the text kept, then how many characters were left out);
- `printable_list` caps a list for metadata: a few escaped examples, then how many more there are;
- `loggable_reason` is a quarantine reason without the value it quotes: the field and its type stay, the value
  stays only in the quarantine table (`raw`, `reason`), readable by those allowed to read the org's data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TEXT_LIMIT = 200  # characters of one name or reason in a log line or a metadata entry
EXAMPLES = 5  # entries of a list in metadata, before "... N more"

_ESCAPED = re.compile(
    "[\\\\\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
    "\ufff9-\ufffb\ud800-\udfff]"
)
_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

# spark_ops/parse.py's reason for a value that does not fit its column (value_errors_sql), which quotes the value.
_VALUE_REASON = re.compile(r"field (?P<field>\S+) value '.*' is not a valid (?P<type>\S+)", re.S)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: object, limit: int = TEXT_LIMIT) -> str:
    """`text` (any value; None is empty) on one line, with nothing that could forge or disguise what follows, at
    most `limit` characters plus the count of those left out."""
    escaped = _ESCAPED.sub(_escape, "" if text is None else str(text))
    if len(escaped) <= limit:
        return escaped
    return f"{escaped[:limit]}... ({len(escaped) - limit} more characters)"


def printable_list(values: Iterable[object], count: int = EXAMPLES, limit: int = TEXT_LIMIT) -> list[str]:
    """The first `count` of `values` made `printable`, then `... N more` when there are more."""
    items = list(values)
    return with_more([printable(v, limit) for v in items[:count]], len(items))


def with_more(shown: list[str], total: int) -> list[str]:
    """`shown` (examples already printable), then `... N more` when `total` is larger."""
    return [*shown, f"... {total - len(shown)} more"] if total > len(shown) else shown


def loggable_reason(reason: object, limit: int = TEXT_LIMIT) -> str:
    """A quarantine reason for a log line or metadata: `printable`, and a value it quotes left out (the field and
    its type named instead)."""
    text = "" if reason is None else str(reason)
    return printable(
        _VALUE_REASON.sub(
            r"field \g<field>: its value is not a valid \g<type> (the value is in "
            r"_quarantine)",
            text,
        ),
        limit,
    )
