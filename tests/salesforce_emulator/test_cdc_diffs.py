"""Long text updates sent as unified diffs (FaultConfig.diff_over_chars) and the corrupt-diff fault."""

from __future__ import annotations

import hashlib
import re

from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.testing import body, header

LONG = "\r\n".join(f"Line {i}: renewal pricing call — café 🚀" for i in range(60))
EDITED = LONG.replace("Line 7:", "L7:") + "\r\nA closing line."


def _emulator(tmp_path, **faults) -> Emulator:
    return Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", roll_seconds=3600, faults=FaultConfig(**faults))


def _updates(emu: Emulator, landed_events, changes: list[tuple[str, dict]]) -> list[dict]:
    for record_id, values in changes:
        with emu.store.transaction() as txn:
            txn.update("Account", record_id, values)
    return [e for e in landed_events(emu) if header(e)["changeType"] == "UPDATE"]


def test_a_long_text_update_is_sent_as_a_diff_in_salesforce_shape(tmp_path, landed_events):
    with _emulator(tmp_path, diff_over_chars=1000) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A", "Description": LONG})
        [update] = _updates(emu, landed_events, [(account, {"Description": EDITED, "Rating": "Hot"})])
    h, b = header(update), body(update)
    assert "diffFields" not in h and "Description" in h["changedFields"]  # CometD: the value's shape says it
    assert b["Rating"] == "Hot" and set(b["Description"]) == {"diff"}
    diff = b["Description"]["diff"]
    lines = diff.split("\n")
    assert lines[0] == "--- " and lines[1] == "+++ " + hashlib.sha256(EDITED.encode()).hexdigest()
    assert all(re.fullmatch(r"@@ -\d+,\d+ \+\d+,\d+ @@", x) for x in lines if x.startswith("@@"))
    assert not any(x.startswith(" ") for x in lines[2:])  # no context lines, as Salesforce
    assert len(diff) < len(EDITED)


def test_short_values_big_rewrites_and_disabled_knob_send_the_whole_value(tmp_path, landed_events):
    with _emulator(tmp_path, diff_over_chars=1000) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A", "Description": "short"})
        rewritten = "\n".join(f"Completely new {i}" for i in range(80))
        updates = _updates(
            emu,
            landed_events,
            [
                (account, {"Description": LONG}),
                (account, {"Description": EDITED}),
                (account, {"Description": rewritten}),
            ],
        )
        emu.set_faults(diff_over_chars=None)
        later = _updates(emu, landed_events, [(account, {"Description": EDITED})])[-1:]
    bodies = [body(e)["Description"] for e in updates + later]
    assert [isinstance(v, dict) for v in bodies] == [False, True, False, False]
    assert bodies[0] == LONG and bodies[2] == rewritten and bodies[3] == EDITED


def test_one_event_for_several_records_carries_a_diff_only_when_their_old_values_agree(tmp_path, landed_events):
    with _emulator(tmp_path, diff_over_chars=1000) as emu:
        with emu.store.transaction() as txn:
            same = [txn.create("Account", {"Name": f"S{i}", "Description": LONG}) for i in range(2)]
            other = txn.create("Account", {"Name": "O", "Description": LONG + " (other)"})
        with emu.store.transaction() as txn:
            txn.update_many("Account", same, {"Description": EDITED})
        with emu.store.transaction() as txn:
            txn.update_many("Account", [same[0], other], {"Description": LONG})
        updates = [e for e in landed_events(emu) if header(e)["changeType"] == "UPDATE"]
    assert [header(e)["recordIds"] for e in updates] == [same, [same[0], other]]
    assert isinstance(body(updates[0])["Description"], dict) and body(updates[1])["Description"] == LONG


def test_corrupt_fraction_sends_diffs_that_cannot_be_verified(tmp_path, landed_events):
    with _emulator(tmp_path, diff_over_chars=1000, diff_corrupt_fraction=1.0, seed=3) as emu:
        with emu.store.transaction() as txn:
            account = txn.create("Account", {"Name": "A", "Description": LONG})
        values = [EDITED, LONG, EDITED, LONG, EDITED, LONG]
        updates = _updates(emu, landed_events, [(account, {"Description": v}) for v in values])
    good = {hashlib.sha256(v.encode()).hexdigest() for v in values}
    kinds = set()
    for update, old in zip(updates, [LONG, *values[:-1]]):
        diff = body(update)["Description"]["diff"]
        removed = [x[1:] for x in diff.split("\n")[2:] if x.startswith("-")]
        if diff.split("\n")[1][4:] not in good:
            kinds.add("hash")
        else:
            assert any(x not in old.split("\r\n") for x in removed)  # made against another base
            kinds.add("base")
    assert kinds == {"hash", "base"}
