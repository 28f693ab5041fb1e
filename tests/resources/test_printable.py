"""Text from the landing zone in a log line or metadata: escaped, capped, and without the values a reason quotes."""

from __future__ import annotations

import pytest

from resources.printable import loggable_reason, printable, printable_list, with_more


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Account", "Account"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("\x00\x1b[31m\x7f\x85", "\\x00\\x1b[31m\\x7f\\x85"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("abc\u202edcb\u2066\u200b\ufeff", "abc\\u202edcb\\u2066\\u200b\\ufeff"),
        ("\ud800", "\\ud800"),
        ("a\\nb", "a\\\\nb"),  # a backslash is doubled: an escape cannot be forged
        ("Zoë 名前", "Zoë 名前"),
        (None, ""),
    ],
)
def test_printable_escapes_what_could_forge_or_disguise_a_line(text, shown):
    assert printable(text) == shown


def test_printable_caps_the_length_and_says_how_much_was_left_out():
    assert printable("x" * 250, 200) == "x" * 200 + "... (50 more characters)"
    assert printable("\n" * 150, 200) == "\\n" * 100 + "... (100 more characters)"


def test_lists_show_a_few_entries_and_a_count():
    assert printable_list(["a\n", "b", "c"], 2) == ["a\\n", "b", "... 1 more"]
    assert printable_list(["a", "b"], 2) == ["a", "b"]
    assert with_more(["x"], 1) == ["x"] and with_more([], 3) == ["... 3 more"]


def test_a_reason_loses_the_value_it_quotes_and_keeps_field_and_type():
    assert (
        loggable_reason("field Email value 'john@x.com' is not a valid email")
        == "field Email: its value is not a valid email (the value is in _quarantine)"
    )
    assert (
        loggable_reason("field N value 'it's\nmany' is not a valid int")
        == "field N: its value is not a valid int (the value is in _quarantine)"
    )
    assert loggable_reason("unknown changeType 'X\n'") == "unknown changeType 'X\\n'"
