"""replication.unified_diff: Salesforce CDC unified diffs applied to stored text, checked by SHA-256
(docs/design/contract.md §3)."""

from __future__ import annotations

import json

import pytest

from replication.unified_diff import DiffError, apply_diff, diff_text, resolve_record, sha256_hex
from salesforce_emulator.text_diff import corrupted, unified_diff

PARAGRAPHS = [f"Paragraph {i}: renewal pricing call demo escalation contract follow-up budget." for i in range(40)]


def roundtrip(old: str, new: str) -> str:
    return apply_diff(old, unified_diff(old, new))


def test_salesforce_documented_shape_is_applied():
    old = "Intro\nBusiness applications are moving to the cloud.\nMiddle\nEnd"
    new = "Intro\nBusiness apps are moving to the cloud.\nMiddle\nEnd"
    diff = (
        f"--- \n+++ {sha256_hex(new)}\n@@ -2,1 +2,1 @@\n-Business applications are moving to the cloud.\n"
        f"+Business apps are moving to the cloud."
    )
    assert apply_diff(old, diff) == new


def test_multi_line_edit_insert_and_delete():
    lines = list(PARAGRAPHS)
    lines[5] = "Paragraph 5 rewritten."
    lines.insert(20, "A new paragraph.")
    del lines[33]
    old, new = "\n".join(PARAGRAPHS), "\n".join(lines)
    diff = unified_diff(old, new)
    assert diff.count("@@ -") == 3  # several hunks
    assert apply_diff(old, diff) == new


def test_unicode_lines():
    old = "\n".join(["Überblick: Café, naïve, 東京, emoji 🚀", *PARAGRAPHS])
    new = old.replace("🚀", "🛰️").replace("Paragraph 7:", "Абзац 7:")
    assert roundtrip(old, new) == new


def test_crlf_separators_are_kept_for_surviving_and_new_lines():
    old = "\r\n".join(PARAGRAPHS)
    lines = list(PARAGRAPHS)
    lines[2] = "changed"
    lines.append("appended at the end")
    new = "\r\n".join(lines)
    assert roundtrip(old, new) == new


def test_mixed_separators_survive():
    old = "a\r\nb\nc\rd"
    new = "a\r\nB\nc\rd"
    assert roundtrip(old, new) == new


def test_single_line_base_growing_crlf_lines_is_found_by_its_hash():
    old, new = "x" * 50, "x" * 50 + "\r\nsecond line"
    assert roundtrip(old, new) == new


def test_no_newline_at_end_either_way():
    with_end = "\n".join(PARAGRAPHS) + "\n"
    without = "\n".join(PARAGRAPHS)
    assert roundtrip(without, with_end) == with_end
    assert roundtrip(with_end, without) == without
    assert roundtrip(with_end, with_end.replace("Paragraph 3:", "P3:")) == with_end.replace("Paragraph 3:", "P3:")


def test_gnu_no_newline_marker_and_context_lines_are_understood():
    old, new = "a\nb\nc", "a\nB\nc"
    diff = f"--- \n+++ {sha256_hex(new)}\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n"
    assert apply_diff(old, diff) == new


def test_wrong_hash_is_refused():
    old, new = "\n".join(PARAGRAPHS), "\n".join(PARAGRAPHS[:-1])
    with pytest.raises(DiffError, match="SHA-256"):
        apply_diff(old, corrupted(old, new, "hash"))


def test_diff_made_against_another_base_does_not_apply():
    old = "\n".join(PARAGRAPHS)
    new = old.replace("Paragraph 9:", "P9:")
    with pytest.raises(DiffError, match="does not match"):
        apply_diff(old, corrupted(old, new, "base"))


def test_diff_against_a_stale_base_fails_even_when_the_hunk_matches():
    """The hunk's lines match, but the base differs elsewhere: only the hash can tell."""
    base = "\n".join(PARAGRAPHS)
    stale = base.replace("Paragraph 30:", "Old 30:")
    new = base.replace("Paragraph 1:", "P1:")
    with pytest.raises(DiffError, match="SHA-256"):
        apply_diff(stale, unified_diff(base, new))


def test_hunk_outside_the_value_and_malformed_diffs_are_refused():
    new = "a\nb"
    with pytest.raises(DiffError, match="outside"):
        apply_diff("a", f"--- \n+++ {sha256_hex(new)}\n@@ -5,1 +5,1 @@\n-x\n+y")
    with pytest.raises(DiffError, match="truncated"):
        apply_diff("a\nb", f"--- \n+++ {sha256_hex(new)}\n@@ -1,2 +1,2 @@\n-a")
    with pytest.raises(DiffError, match="SHA-256 hash"):
        apply_diff("a", "--- \n+++ not-a-hash\n@@ -1,1 +1,1 @@\n-a\n+b")


def test_diff_text_reads_both_event_shapes():
    diff = unified_diff("a\nb", "a\nc")
    assert diff_text(json.dumps({"diff": diff})) == diff  # Streaming API: {"diff": ...} kept as JSON text
    assert diff_text(diff) == diff  # Pub/Sub API: the bare diff
    with pytest.raises(DiffError):
        diff_text("plain text")


def change(change_type: str, fields: dict, diffs: tuple[str, ...] = ()) -> dict:
    return {
        "change_type": change_type,
        "fields": dict(fields),
        "set_fields": sorted(fields),
        "diff_fields": list(diffs),
    }


def as_diff(old: str, new: str) -> str:
    return json.dumps({"diff": unified_diff(old, new)})


def test_resolve_record_chains_diffs_over_stored_and_earlier_values():
    v0 = "\n".join(PARAGRAPHS)
    v1 = v0.replace("Paragraph 1:", "P1:")
    v2 = v1.replace("Paragraph 2:", "P2:")
    rows = [
        change("UPDATE", {"Description": as_diff(v0, v1)}, ("Description",)),
        change("UPDATE", {"Description": as_diff(v1, v2), "Name": "x"}, ("Description",)),
    ]
    assert resolve_record(rows, {"Description": v0}, {"Description"}) == (2, None)
    assert [r["fields"]["Description"] for r in rows] == [v1, v2]


def test_resolve_record_after_a_create_in_the_batch_and_unknown_or_null_bases():
    v0 = "\n".join(PARAGRAPHS)
    v1 = v0.replace("Paragraph 1:", "P1:")
    created = [
        change("CREATE", {"Description": v0}),
        change("UPDATE", {"Description": as_diff(v0, v1)}, ("Description",)),
    ]
    assert resolve_record(created, None, {"Description"}) == (1, None)

    unknown = [change("UPDATE", {"Description": as_diff(v0, v1)}, ("Description",))]
    done, failed = resolve_record(unknown, None, {"Description"})
    assert (done, failed[0], unknown[0]["change_type"]) == (0, "Description", "GAP_UPDATE")

    nulled = [
        change("UPDATE", {"Description": None}),
        change("UPDATE", {"Description": as_diff(v0, v1)}, ("Description",)),
    ]
    done, failed = resolve_record(nulled, {"Description": v0}, {"Description"})
    assert failed == ("Description", "the stored value is null") and nulled[1]["change_type"] == "GAP_UPDATE"


def test_resolve_record_stops_at_the_first_failure():
    v0 = "\n".join(PARAGRAPHS)
    v1 = v0.replace("Paragraph 1:", "P1:")
    rows = [
        change("UPDATE", {"Description": json.dumps({"diff": corrupted(v0, v1, "hash")})}, ("Description",)),
        change("UPDATE", {"Description": as_diff(v1, v0)}, ("Description",)),
    ]
    done, failed = resolve_record(rows, {"Description": v0}, {"Description"})
    assert done == 0 and "SHA-256" in failed[1]
    assert [r["change_type"] for r in rows] == ["GAP_UPDATE", "UPDATE"]  # the fold skips the second (dirty)
