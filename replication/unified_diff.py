"""Salesforce CDC text diffs (docs/design/contract.md §3): rebuild a large text field's new value from the stored one.

An UPDATE may carry a large text field as `{"diff": "<unified diff>"}` (the header's `diffFields` names it).
Salesforce's shape (Change Data Capture Developer Guide, "Data Differences in Event Fields"), lines joined by `\\n`:
`--- ` / `+++ <SHA-256 of the whole new value, hex>` / `@@ -2,1 +2,1 @@` / `-old line 2` / `+new line 2`.

The value is cut into lines at its line breaks (`\\r\\n`, `\\r` or `\\n`); diff lines carry no line break. So a
value is a list of lines *and* the separators between them: lines that survive keep the separator they had, and
new lines get the value's own (its first separator; Salesforce stores what the client sent, often `\\r\\n` from
browsers). Hunks must match the base exactly where their header says (no fuzzy offsets): any doubt ends as
`DiffError`, and the caller makes the record dirty so it is fetched again. The SHA-256 of the rebuilt value (UTF-8)
must equal the `+++` hash: that is the safety net, a wrong base never yields a wrong value. When the base has no
line break at all, the separator of new lines is unknown: each candidate is tried and only a matching hash is
accepted.

`resolve_record` walks one record's applied changes in commit order, so that a diff applies to the value left by
the changes before it. This is plain Python on the driver, over the few rows that carry a diff (there is no Spark
built-in for patching); `replication/diffs.py` picks those rows and feeds the fold.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from spark_ops.fold import RESETS, gap_type

_BREAK = re.compile(r"(\r\n|\r|\n)")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SHA = re.compile(r"^[0-9a-fA-F]{64}$")
_SEPARATORS = ("\n", "\r\n", "\r")


class DiffError(ValueError):
    """The diff cannot be applied to this base, or the result's hash differs: the reason says which."""


@dataclass(frozen=True)
class Hunk:
    old_start: int  # 1-based; with old_count 0, the line after which to insert
    old_count: int
    new_count: int
    lines: tuple[str, ...]  # each starts with ' ', '-' or '+'


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_lines(value: str) -> tuple[list[str], list[str]]:
    """A value's lines and the separators between them (`len(seps) == len(lines) - 1`)."""
    parts = _BREAK.split(value)
    return parts[0::2], parts[1::2]


def parse_diff(diff: str) -> tuple[str, list[Hunk]]:
    """The `+++` hash and the hunks of a diff in Salesforce's shape."""
    rows = _BREAK.split(diff)[0::2]
    if rows and rows[-1] == "":
        rows.pop()  # a line break after the last diff line
    sha, index = None, 0
    while index < len(rows) and not rows[index].startswith("@@"):
        if rows[index].startswith("+++"):
            tokens = rows[index][3:].split()
            sha = tokens[0] if tokens else ""
        index += 1
    if sha is None or not _SHA.match(sha):
        raise DiffError("no SHA-256 hash in the diff's +++ line")
    hunks: list[Hunk] = []
    while index < len(rows):
        match = _HUNK.match(rows[index])
        if not match:
            raise DiffError(f"diff line {index + 1} is not a hunk header")  # its text is the org's data
        old_start = int(match[1])
        old_count = 1 if match[2] is None else int(match[2])
        new_count = 1 if match[4] is None else int(match[4])
        index += 1
        lines: list[str] = []
        old_seen = new_seen = 0
        while index < len(rows) and (old_seen < old_count or new_seen < new_count):
            row = rows[index]
            index += 1
            if row.startswith("\\"):  # "\ No newline at end of file": lines here carry no line break anyway
                continue
            kind = row[:1] or " "  # some tools strip the space of an empty context line
            if kind not in " -+":
                raise DiffError(f"diff line {index} is not a context, removed or added line")
            lines.append(kind + row[1:])
            old_seen += kind != "+"
            new_seen += kind != "-"
        while index < len(rows) and rows[index].startswith("\\"):
            index += 1
        if (old_seen, new_seen) != (old_count, new_count):
            raise DiffError(
                f"hunk at -{old_start} is truncated: {old_seen}/{old_count} old and {new_seen}/{new_count} new lines"
            )
        hunks.append(Hunk(old_start, old_count, new_count, tuple(lines)))
    return sha.lower(), hunks


def _patched(lines: list[str], seps: list[str], hunks: list[Hunk]) -> list[tuple[str, str | None]]:
    """The new lines, each with the separator that followed it in the base (None for new lines and for the
    base's last line)."""
    out: list[tuple[str, str | None]] = []
    at = 0  # next base line (0-based) not yet copied
    for hunk in hunks:
        start = hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1
        if start < at or start > len(lines):
            raise DiffError(
                f"hunk at -{hunk.old_start},{hunk.old_count} is outside the stored value "
                f"({len(lines)} lines) or overlaps the previous hunk"
            )
        out.extend((lines[i], seps[i] if i < len(seps) else None) for i in range(at, start))
        at = start
        for row in hunk.lines:
            kind, text = row[0], row[1:]
            if kind == "+":
                out.append((text, None))
                continue
            if at >= len(lines) or lines[at] != text:
                raise DiffError(
                    f"hunk at -{hunk.old_start},{hunk.old_count} does not match the stored value at line {at + 1}"
                )
            if kind == " ":
                out.append((text, seps[at] if at < len(seps) else None))
            at += 1
    out.extend((lines[i], seps[i] if i < len(seps) else None) for i in range(at, len(lines)))
    return out


def _joined(lines: list[tuple[str, str | None]], separator: str) -> str:
    parts: list[str] = []
    for i, (text, sep) in enumerate(lines):
        parts.append(text)
        if i + 1 < len(lines):
            parts.append(sep or separator)
    return "".join(parts)


def apply_diff(base: str, diff: str) -> str:
    """The new value: `diff` applied to `base`, its SHA-256 checked against the `+++` hash."""
    sha, hunks = parse_diff(diff)
    lines, seps = split_lines(base)
    patched = _patched(lines, seps, hunks)
    # New lines take the base's first separator; the others are tried too (a base of one line has none, and a
    # value may mix them): only a value whose hash matches is ever returned.
    tried: set[str] = set()
    for separator in dict.fromkeys([*seps[:1], *_SEPARATORS]):
        value = _joined(patched, separator)
        if value not in tried and sha256_hex(value) == sha:
            return value
        tried.add(value)
    raise DiffError("SHA-256 of the patched value differs from the diff's +++ hash")


def diff_text(value: str | None) -> str:
    """The unified diff in a diff field's value: `{"diff": "..."}` (Streaming API JSON, kept as its JSON text by
    the parse) or the bare diff text (the Pub/Sub API shape)."""
    if value is None:
        raise DiffError("the event carries no value for the diff field")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    if isinstance(parsed, dict) and isinstance(parsed.get("diff"), str):
        return parsed["diff"]
    if isinstance(parsed, str) and parsed.startswith("---"):
        return parsed
    raise DiffError('the value is neither {"diff": "<unified diff>"} nor a unified diff')


def resolve_record(
    changes: list[dict], stored: dict[str, str | None] | None, columns: set[str]
) -> tuple[int, tuple[str, str] | None]:
    """Resolve the diffs of one record's *applied* changes, in commit order, in place.

    `changes`: dicts with `change_type`, `fields` (name -> JSON text), `set_fields`, `diff_fields`, sorted by
    position; only those the fold applies. `stored`: the replica row's values, or None for a record the replica
    does not have. `columns`: the replicated text columns (other diff fields are never written, so never resolved).

    Each diff is applied to the value its field holds just before the change (the stored value, or what an earlier
    change set; a CREATE/UNDELETE resets every field) and its `fields` entry becomes the new text. The first diff
    that cannot be resolved turns its change into `GAP_<type>` (the fold then marks the record dirty there and
    skips what follows) and ends the walk. Returns the number of diffs applied and, if one failed, its field and
    why.
    """
    values = dict(stored) if stored is not None else None
    applied = 0
    for change in changes:
        fields = change["fields"]
        if change["change_type"] in RESETS:
            values = {}
        for name in change["diff_fields"] or ():
            if name not in columns:
                continue
            try:
                if values is None:
                    raise DiffError("the record is not in the replica, so there is no stored value to patch")
                if (value := values.get(name)) is None:
                    raise DiffError("the stored value is null")
                fields[name] = apply_diff(value, diff_text(fields.get(name)))
            except DiffError as exc:
                change["change_type"] = gap_type(change["change_type"])
                return applied, (name, str(exc))
            applied += 1
        if values is not None:
            values.update({name: fields.get(name) for name in change["set_fields"] or ()})
    return applied, None
