"""Long text fields sent as diffs, end to end: emulator org -> landing -> Dagster materialize() -> reconcile."""

from __future__ import annotations

import pytest
from org_compare import differences
from test_sync import assert_equal_to_org, catch_up, make_platform, run_sensor_requests

from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.testing import body, header, read_landed_events
from salesforce_emulator.workload import Workload

OBJECTS = ["Account", "Opportunity"]


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def total(platform, key: str) -> int:
    return sum(int(platform.materialization_of(n).get(key, 0)) for n in OBJECTS)


@pytest.mark.slow
def test_descriptions_sent_as_diffs_equal_the_org_and_corrupt_ones_are_reconciled(tmp_path, org):
    # No person accounts: their Names make records dirty too, and here the only dirty records are unresolved diffs.
    workload = Workload(org, seed=21, long_text=True, person_accounts=False)
    workload.build_org(accounts=15)
    platform = make_platform(tmp_path, org, objects=OBJECTS)
    platform.run()  # initial load: long multi-line Descriptions from the Bulk API

    org.set_faults(FaultConfig(diff_over_chars=1000, diff_corrupt_fraction=0.15, seed=4))
    workload.run(changes=150)
    catch_up(platform, org)
    applied, unresolved = total(platform, "diffs_applied"), total(platform, "diffs_unresolved")
    assert applied > 10 and unresolved > 0, (applied, unresolved)
    warnings = [
        e.user_message
        for run in platform.instance.get_runs()
        for e in platform.instance.all_logs(run.run_id)
        if "cannot be applied" in (e.user_message or "")
    ]
    assert len(warnings) == unresolved  # one line per unresolved diff in the run's event log (record, field, why)
    # The only gaps and dirty records of this workload are the unresolved diffs (one record each).
    assert total(platform, "gaps") == unresolved == total(platform, "dirty_records")
    for name in OBJECTS:
        meta = platform.materialization_of(name)
        assert meta["events_read"] == sum(
            meta[k] for k in ("applied", "gaps", "late", "superseded", "dirty_skipped", "held", "overflow")
        )
        rows = platform.rows(name)
        assert not [r for r in rows.values() if (r["Description"] or "").startswith('{"diff"')]
        dirty = {rid for rid, r in rows.items() if r["_sf_dirty_since"] is not None}
        # Every difference from the org is a record waiting for reconciliation: no diff wrote a wrong value.
        wrong = {line.split()[1].split(".")[0].rstrip(":") for line in differences(org, name, rows, limit=0)}
        assert wrong <= dirty, wrong - dirty

    requests = run_sensor_requests(platform)  # reconcile mode fetches the dirty records by id
    assert requests and all(r.tags["cdc/mode"] == "reconcile" for r in requests)
    assert_equal_to_org(platform, org, OBJECTS)

    org.set_faults(FaultConfig(diff_over_chars=1000, seed=5))  # diffs over reconciled rows apply too
    workload.run(changes=60)
    catch_up(platform, org)
    assert total(platform, "diffs_applied") > 0 and total(platform, "diffs_unresolved") == 0
    assert_equal_to_org(platform, org, OBJECTS)


def test_a_long_text_edit_landed_over_cometd_without_diff_fields_gives_the_orgs_text(tmp_path, org):
    """The emulator lands what the Streaming API sends: a long text edit as `{"diff": ...}` and no diffFields in the
    header. The replica holds the org's text, not the diff's JSON, with nothing left to reconcile."""
    long = "\r\n".join(f"Line {i}: renewal pricing call — café" for i in range(60))
    with org.store.transaction() as txn:
        account = txn.create("Account", {"Name": "Acme", "Description": long})
    platform = make_platform(tmp_path, org, objects=["Account"])
    platform.run()  # initial load
    with org.store.transaction() as txn:
        txn.update("Account", account, {"Description": long.replace("Line 7:", "L7:"), "Rating": "Hot"})
    org.flush_cdc()
    [update] = [e for e in read_landed_events(org.landing_dir) if header(e)["changeType"] == "UPDATE"]
    assert set(body(update)["Description"]) == {"diff"} and "diffFields" not in header(update)
    catch_up(platform, org)
    meta = platform.materialization_of("Account")
    assert (meta["diffs_applied"], meta["diffs_unresolved"], meta["dirty_records"]) == (1, 0, 0)
    assert platform.rows("Account")[account]["Description"] == org.store.get_row("Account", account)["Description"]
    assert_equal_to_org(platform, org, ["Account"])
