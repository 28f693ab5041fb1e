"""Commit order = event order, even with concurrent clients (timestamps may repeat; commit numbers never do); SOQL filters agree with a plain Python filter."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.testing import event_order, header
from salesforce_emulator.values import iso_to_ms


def test_concurrent_clients_get_strictly_ordered_commits(emulator: Emulator, landed_events):
    sf = simple_salesforce_client(emulator)
    ids = [sf.Account.create({"Name": f"A{n}"})["id"] for n in range(4)]
    errors: list[BaseException] = []

    def hammer(worker: int) -> None:
        client = simple_salesforce_client(emulator)
        try:
            for n in range(40):
                client.Account.update(ids[(worker + n) % 4], {"NumberOfEmployees": worker * 1000 + n})
        except BaseException as exc:  # noqa: BLE001 surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    events = landed_events(emulator)
    assert len(events) == 4 + 160
    orders = [event_order(e) for e in events]
    # Transactions may share a millisecond (as in a real org); their commit numbers order them.
    assert orders == sorted(orders) and len({o[1] for o in orders}) == len(orders)
    last: dict[str, dict] = {}
    for event in events:
        for record_id in header(event)["recordIds"]:
            if record_id in last:  # one record's stamps strictly increase
                assert header(event)["commitTimestamp"] > header(last[record_id])["commitTimestamp"]
            last[record_id] = event
    for row in sf.query_all("SELECT Id, NumberOfEmployees, SystemModstamp FROM Account")["records"]:
        final = last[row["Id"]]
        assert iso_to_ms(row["SystemModstamp"]) == header(final)["commitTimestamp"]
        assert final["data"]["payload"].get("NumberOfEmployees", row["NumberOfEmployees"]) == row["NumberOfEmployees"]


RATINGS = st.sampled_from(["Hot", "Warm", "Cold", None])
ROWS = st.lists(st.tuples(RATINGS, st.integers(0, 5), st.booleans()), min_size=1, max_size=12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ROWS, rating=RATINGS, employees=st.integers(0, 5), op=st.sampled_from(["=", "!=", "<", ">="]))
def test_soql_where_agrees_with_python(tmp_path_factory, rows, rating, employees, op):
    directory: Path = tmp_path_factory.mktemp("soql")
    with Emulator(directory / "org") as emu:
        with emu.store.transaction() as txn:
            created = [
                txn.create("Account", {"Name": f"A{n}", "Rating": r, "NumberOfEmployees": e})
                for n, (r, e, _) in enumerate(rows)
            ]
            txn.delete("Account", [i for i, (_, _, gone) in zip(created, rows, strict=True) if gone] or [])
        literal = "null" if rating is None else f"'{rating.lower()}'"
        soql = (
            f"SELECT Id FROM Account WHERE (Rating = {literal} OR NumberOfEmployees {op} {employees}) "
            f"AND NOT Name = 'A0'"
        )
        got = {r["Id"] for r in simple_salesforce_client(emu).query_all(soql)["records"]}

    def number_matches(value: int) -> bool:
        return {"=": value == employees, "!=": value != employees, "<": value < employees, ">=": value >= employees}[op]

    expected = {
        record_id
        for n, (record_id, (r, e, gone)) in enumerate(zip(created, rows, strict=True))
        if not gone and n != 0 and (r == rating or number_matches(e))
    }
    assert got == expected
