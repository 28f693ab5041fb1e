"""Store and events never drift: folding the landed events over the initial snapshot gives exactly what the
query API returns, after a workload run both directly against the store and through the REST API."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.testing import body, event_order, header, read_landed_events
from salesforce_emulator.values import iso_to_ms
from salesforce_emulator.workload import OBJECTS, Workload


def _component_names(describe: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(compound parent, key inside the nested value) -> component field name, from describe()."""
    names = {}
    for fld in describe["fields"]:
        parent = fld["compoundFieldName"]
        if parent:
            prefix = parent[: -len("Address")] if parent.endswith("Address") else ""
            names[(parent, fld["name"][len(prefix) :])] = fld["name"]
    return names


def _flatten(values: dict[str, Any], components: dict[tuple[str, str], str]) -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update({components[(key, part)]: v for part, v in value.items()})
        else:
            flat[key] = value
    return flat


def fold(
    initial: dict[str, dict[str, Any]], events: list[dict[str, Any]], components: dict[str, dict[tuple[str, str], str]]
) -> dict[str, dict[str, Any]]:
    """Apply events in (commitTimestamp, commitNumber, sequenceNumber, replayId) order, Salesforce semantics."""
    state = {rid: dict(row) for rid, row in initial.items()}
    for event in sorted(events, key=event_order):
        h = header(event)
        values = _flatten(body(event), components[h["entityName"]])
        for record_id in h["recordIds"]:
            if h["changeType"] in ("CREATE", "UNDELETE"):
                state[record_id] = {"Id": record_id, **values, "IsDeleted": False}
            elif h["changeType"] == "UPDATE":
                state[record_id].update(values)
            elif h["changeType"] == "DELETE":
                state[record_id]["IsDeleted"] = True
            else:
                raise AssertionError(f"unexpected {h['changeType']} without faults")
            state[record_id]["SystemModstamp"] = h["commitTimestamp"]
    return state


def _rest_value(value: Any) -> Any:
    if isinstance(value, str) and value.endswith("+0000"):
        return value[:-5] + "Z"
    return value


def assert_no_drift(sf: Salesforce, initial: dict[str, dict[str, Any]], events: list[dict[str, Any]]) -> int:
    describes = {name: sf.restful(f"sobjects/{name}/describe") for name in OBJECTS}
    components = {name: _component_names(d) for name, d in describes.items()}
    folded = fold(initial, events, components)
    checked = 0
    for name, described in describes.items():
        parents = {f["compoundFieldName"] for f in described["fields"] if f["compoundFieldName"]}
        fields = [f["name"] for f in described["fields"] if f["name"] not in parents and not f["calculated"]]
        rows = sf.query_all(f"SELECT {', '.join(fields)} FROM {name}", include_deleted=True)["records"]
        seen = set()
        for row in rows:
            replica = folded[row["Id"]]
            for fld in fields:
                expected = _rest_value(row[fld])
                if fld == "SystemModstamp":
                    expected = iso_to_ms(expected)
                assert replica.get(fld) == expected, f"{name} {row['Id']} {fld}: events say {replica.get(fld)!r}"
            seen.add(row["Id"])
            checked += 1
        gone = [rid for rid, r in folded.items() if rid[:3] == described["keyPrefix"] and rid not in seen]
        assert all(folded[rid]["IsDeleted"] for rid in gone), "only hard-deleted records may be missing"
    return checked


@pytest.mark.slow
def test_store_and_events_never_drift(emulator: Emulator, sf: Salesforce):
    workload = Workload(emulator, seed=11, large_transaction=(50, 150))
    workload.build_org(accounts=120, contacts_per_account=2, opportunities_per_account=1, cases_per_account=1)
    built = set(emulator.flush_cdc())
    built_through = max(header(e)["commitNumber"] for e in read_landed_events(emulator.landing_dir))
    initial = {}
    for name in OBJECTS:
        for row in emulator.store.snapshot(name):
            row["SystemModstamp"] = iso_to_ms(row["SystemModstamp"])
            initial[row["Id"]] = row

    stats = workload.run(changes=2_500)
    rest = Workload(sf, seed=12, large_transaction=(20, 60))
    rest_stats = rest.run(changes=150)
    files = [f for f in emulator.flush_cdc() if f not in built]
    events = read_landed_events(emulator.landing_dir)
    events = [e for e in events if header(e)["commitNumber"] > built_through]  # the build's last ms may be shared

    kinds = Counter(header(e)["changeType"] for e in events)
    assert {"CREATE", "UPDATE", "DELETE", "UNDELETE"} <= kinds.keys()
    assert any(len(header(e)["recordIds"]) > 1 for e in events)
    assert stats["convert_lead"] and stats["large"] and stats["purge"] and rest_stats["transactions"] > 100
    assert files and assert_no_drift(sf, initial, events) > 1_000

    in_file_order = [event_order(e) for e in events]
    assert in_file_order == sorted(in_file_order), "without late files, files hold events in commit order"
    stamps_per_key: dict[str, set[int]] = {}
    for event in events:
        stamps_per_key.setdefault(header(event)["transactionKey"], set()).add(header(event)["commitTimestamp"])
    assert all(len(s) == 1 for s in stamps_per_key.values())
    numbers = [header(e)["commitNumber"] for e in events]
    assert numbers == sorted(numbers), "commit numbers order transactions, whatever their timestamps"
    last: dict[str, tuple[int, str]] = {}  # record -> (commitTimestamp, transactionKey) of its last event
    for event in events:  # transactions may share a millisecond, but one record's stamps strictly increase
        stamp, key = header(event)["commitTimestamp"], header(event)["transactionKey"]
        for record_id in header(event)["recordIds"]:
            before = last.get(record_id)
            assert before is None or stamp > before[0] or key == before[1], (record_id, before, stamp)
            last[record_id] = (stamp, key)


def test_same_seed_same_workload_and_recency_bias(tmp_path):
    results, updates = [], Counter()
    for run in range(2):
        with Emulator(tmp_path / f"org{run}", landing_dir=tmp_path / f"landing{run}") as emu:
            workload = Workload(emu, seed=5, large_transaction=(5, 10))
            workload.build_org(
                accounts=400, contacts_per_account=0, opportunities_per_account=0, cases_per_account=0, leads=0
            )
            workload.run(changes=3_000)
            results.append([(r["Id"], r["Name"], r["Industry"]) for r in emu.store.snapshot("Account")])
            emu.flush_cdc()
            if run == 0:
                for event in read_landed_events(tmp_path / "landing0"):
                    if header(event)["changeType"] == "UPDATE":
                        updates.update(header(event)["recordIds"])
                account_ids = [r["Id"] for r in emu.store.snapshot("Account")][:400]
    assert results[0] == results[1]
    newest, oldest = account_ids[-40:], account_ids[:200]
    per_new = sum(updates[r] for r in newest) / len(newest)
    per_old = sum(updates[r] for r in oldest) / len(oldest)
    assert per_new > 2 * per_old > 0, (per_new, per_old)


@pytest.mark.slow
def test_twenty_thousand_changes_straight_into_the_store_are_fast(tmp_path):
    import time

    with Emulator(tmp_path / "org", landing_dir=tmp_path / "landing") as emu:
        workload = Workload(emu, seed=3, large_transaction=(20, 50))
        workload.build_org(accounts=300, contacts_per_account=2, opportunities_per_account=1, cases_per_account=1)
        # The CPU time of this process, not the wall clock: beside other test processes (make test runs several) a
        # wall-clock bound measures the machine's load, not the workload's cost.
        started = time.process_time()
        stats = workload.run(changes=20_000)
        elapsed = time.process_time() - started
    assert stats["transactions"] + stats.get("skipped", 0) == 20_000
    assert elapsed < 45, f"20k changes took {elapsed:.1f} s of CPU"
