"""Large text field updates sent as a unified diff, the way Salesforce CDC sends them.

Salesforce (Change Data Capture Developer Guide, "Sending Data Differences for Fields of Updated Records") may
send an updated large text value as `{"diff": "--- \\n+++ <sha256>\\n@@ -2,1 +2,1 @@\\n-old\\n+new"}` and list
the field in `diffFields`: lines are cut at the value's line breaks, hunks carry no context lines, hunk headers
always give both start and length, and the `+++` line holds the SHA-256 (hex, of the UTF-8 new value). It sends
the whole value instead when the diff is not shorter than it. The diff is built with :mod:`difflib`.
"""

from __future__ import annotations

import difflib
import hashlib
import re

_BREAK = re.compile(r"\r\n|\r|\n")
_RANGE = re.compile(r"^@@ -(\S+) \+(\S+) @@$")


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def _full_range(spec: str) -> str:
    return spec if "," in spec else f"{spec},1"


def unified_diff(old: str, new: str, sha: str | None = None) -> str:
    """`new` as a diff against `old`, in Salesforce's shape; `sha` overrides the hash (fault injection)."""
    rows = difflib.unified_diff(
        _BREAK.split(old), _BREAK.split(new), fromfile="", tofile=sha or sha256_hex(new), lineterm="", n=0
    )
    out = []
    for row in rows:
        match = _RANGE.match(row)
        out.append(f"@@ -{_full_range(match[1])} +{_full_range(match[2])} @@" if match else row)
    return "\n".join(out)


def diff_or_value(old: object, new: object, min_chars: int) -> str | None:
    """The diff to send for this update, or None when Salesforce sends the whole value: either value shorter than
    `min_chars`, or a diff no shorter than the new value."""
    if not isinstance(old, str) or not isinstance(new, str) or min(len(old), len(new)) < min_chars:
        return None
    diff = unified_diff(old, new)
    return diff if len(diff) < len(new) else None


def corrupted(old: str, new: str, kind: str) -> str:
    """A diff the subscriber must refuse: `hash` (the +++ hash is of another value) or `base` (made against a
    base the subscriber does not have, so it does not apply)."""
    if kind == "hash":
        return unified_diff(old, new, sha=sha256_hex(new + " "))
    lines = _BREAK.split(old)
    lines[0] = lines[0] + " (edited elsewhere)"
    return unified_diff("\n".join(lines), new)
