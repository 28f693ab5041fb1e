from hypothesis import given
from hypothesis import strategies as st

from salesforce_emulator import ids


def test_case_safe_suffix_matches_salesforce_examples():
    assert ids.to_18("001A0000006Vm9r") == "001A0000006Vm9rIAC"
    assert ids.make_id("001", 1) == "001000000000001AAA"
    assert ids.case_safe_suffix("003000000000001") == "AAA"


def test_ids_are_18_characters_with_key_prefix_and_valid_suffix():
    record_id = ids.make_id("00Q", 62**5 + 12345)
    assert len(record_id) == 18 and record_id.startswith("00Q")
    assert ids.is_valid_id(record_id)
    assert not ids.is_valid_id(record_id[:15] + "AAA") or ids.case_safe_suffix(record_id[:15]) == "AAA"


@given(st.integers(min_value=0, max_value=62**12 - 2))
def test_id_order_is_creation_order(sequence):
    assert ids.make_id("001", sequence) < ids.make_id("001", sequence + 1)


def test_records_created_close_in_time_share_a_leading_substring():
    batch = [ids.make_id("003", n) for n in range(100_000, 100_050)]
    assert len({record_id[:12] for record_id in batch}) <= 2
