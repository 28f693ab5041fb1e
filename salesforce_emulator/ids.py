"""Salesforce record ids: 3-character key prefix, 12 base-62 digits, 3-character case-safe suffix.

The 12 middle characters encode a per-object increasing sequence in the alphabet ``0-9A-Za-z``, whose ASCII
order equals numeric order. Ids therefore sort by creation order, and records created close in time share a
leading substring: the replica tables partition on a prefix of the Id and rely on that locality.
The suffix is Salesforce's case-safe checksum, so 15-character ids from other tools map back correctly.
"""

from __future__ import annotations

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
BODY_LENGTH = 12
DUMMY_ID = "000000000000000AAA"


def case_safe_suffix(id15: str) -> str:
    """The 3 characters Salesforce appends to a 15-character id (one per 5-character chunk)."""
    if len(id15) != 15:
        raise ValueError(f"case-safe suffix needs a 15-character id, got {id15!r}")
    out = []
    for chunk in range(3):
        bits = 0
        for pos, char in enumerate(id15[chunk * 5 : chunk * 5 + 5]):
            if "A" <= char <= "Z":
                bits |= 1 << pos
        out.append(_SUFFIX_ALPHABET[bits])
    return "".join(out)


def to_base62(number: int, width: int = BODY_LENGTH, fixed: bool = True) -> str:
    """``number`` in base 62, left-padded to ``width``; with ``fixed`` it must also fit in ``width``."""
    if number < 0:
        raise ValueError("sequence numbers are non-negative")
    digits = []
    while number:
        number, rem = divmod(number, 62)
        digits.append(BASE62[rem])
    body = "".join(reversed(digits)).rjust(width, "0")
    if fixed and len(body) > width:
        raise OverflowError(f"sequence does not fit in {width} base-62 digits")
    return body


def make_id(key_prefix: str, sequence: int) -> str:
    """The 18-character id of the ``sequence``-th record of the object with ``key_prefix``."""
    id15 = key_prefix + to_base62(sequence)
    return id15 + case_safe_suffix(id15)


def to_18(record_id: str) -> str:
    """Accept a 15- or 18-character id and return the 18-character form (others returned unchanged)."""
    if len(record_id) == 15:
        return record_id + case_safe_suffix(record_id)
    return record_id


def is_valid_id(record_id: str) -> bool:
    return (
        len(record_id) == 18
        and all(c in BASE62 for c in record_id[:15])
        and case_safe_suffix(record_id[:15]) == record_id[15:]
    )
