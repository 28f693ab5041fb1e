"""Both sensors, evaluated with Dagster's real sensor context against a real instance and real tables."""

from __future__ import annotations

import json
import os
import re
import time
import uuid

import dagster as dg
import pytest
from dagster._core.storage.tags import PRIORITY_TAG
from dagster._core.test_utils import create_run_for_test
from harness import Platform, load_lines
from settings import TEST_SPARK_CONF

from cdc_assets.landing_checks import FIXES
from cdc_assets.names import (
    CHANGE_EVENTS_KEY,
    TAG_CUT,
    TAG_MODE,
    TAG_REASON,
    ingest_keys,
    object_tag,
    replica_key,
    run_tags,
    work_tag,
)
from resources.landing_zone import LINK, NOT_EVENTS, STALE_INFLIGHT
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from sensors.landing_zone import REASON_FILES
from sensors.landing_zone import SENSOR_NAME as LANDING
from sensors.reconciliation import SENSOR_NAME as RECONCILE

OBJECTS = ["Account", "Contact", "Opportunity"]


def landing(*names: str) -> set[dg.AssetKey]:
    """A landing run's selection: change_events, and the slice and replica of each object it applies (only)."""
    return {*ingest_keys(names), *(replica_key(n) for n in names)}


def assert_retry_in(message: str, says: str, backoff: float, since: float) -> None:
    """`message` says `says`, then ", in N s": the backoff left, `backoff` less the time since `since` (monotonic, taken
    before the failed run), whatever the machine's speed."""
    found = re.search(re.escape(says) + r" failed, in (\d+) s", message)
    assert found, f"{says!r} not in {message!r}"
    assert backoff - (time.monotonic() - since) - 1 <= int(found.group(1)) <= backoff, message


def evaluate(platform: Platform, name: str, cursor: str | None = None, resources=None):
    context = dg.build_sensor_context(
        instance=platform.instance,
        cursor=cursor,
        definitions=platform.defs,
        resources=resources or platform.defs.resources,
    )
    return platform.defs.get_sensor_def(name)(context)


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)


def test_landing_sensor_requests_one_run_per_new_file_set(platform):
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    first = evaluate(platform, LANDING)
    [request] = first.run_requests
    assert set(request.asset_selection) == landing("Contact")
    assert request.tags[object_tag("Contact")] == "1"
    # Dagster's queue launches it before runs of priority 0 (every other sensor's and schedule's) queued earlier.
    assert int(request.tags[PRIORITY_TAG]) > 0

    again = evaluate(platform, LANDING, cursor=first.cursor)  # same files, run not finished yet
    assert not again.run_requests

    platform.land([event("Account", "CREATE", ["001000000000001AAA"], 2, Name="Acme")], name="b.jsonl")
    more = evaluate(platform, LANDING, cursor=again.cursor)
    [second] = more.run_requests
    assert second.run_key != request.run_key
    assert set(second.asset_selection) == landing("Account")


def test_landing_sensor_leaves_new_files_to_the_next_run_after_the_landing_run_in_flight(platform):
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    first = evaluate(platform, LANDING)
    [request] = first.run_requests
    # Not started yet (QUEUED would need a code location origin; the sensor treats both alike).
    queued = create_run_for_test(
        platform.instance,
        status=dg.DagsterRunStatus.NOT_STARTED,
        tags=request.tags,
        asset_selection=frozenset(request.asset_selection),
    )

    platform.land([event("Contact", "UPDATE", ["003000000000001AAA"], 2, LastName="King")], name="b.jsonl")
    covered = evaluate(platform, LANDING, cursor=first.cursor)
    assert not covered.run_requests  # the queued run ingests b.jsonl too when it starts

    # Files naming another object wait too: one landing run at a time (tests/sensors/test_replica_status.py).
    platform.land([event("Account", "CREATE", ["001000000000001AAA"], 3, Name="Acme")], name="c.jsonl")
    waiting = evaluate(platform, LANDING, cursor=covered.cursor)
    assert not waiting.run_requests and queued.run_id[:8] in skipped(waiting)

    platform.instance.report_run_canceled(queued)  # it never ran: every file is still pending
    platform.set_options(retry_backoff_seconds=0)
    [other] = evaluate(platform, LANDING, cursor=waiting.cursor).run_requests
    assert set(other.asset_selection) == landing("Account", "Contact")


def test_landing_sensor_closes_the_newest_transaction_after_the_timeout(platform, sample_dir):
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()
    platform.replication_close_after(3600)  # far longer than the run took, however busy the machine
    quiet = evaluate(platform, LANDING)
    assert not quiet.run_requests  # ingested; the newest transaction is younger than the timeout
    platform.replication_close_after(0)
    closing = evaluate(platform, LANDING, cursor=quiet.cursor)
    [request] = closing.run_requests
    assert request.run_key.startswith("close-")
    assert int(request.tags[PRIORITY_TAG]) > 0
    assert not evaluate(platform, LANDING, cursor=closing.cursor).run_requests


def test_closing_waits_for_the_landing_run_in_flight(platform, sample_dir):
    """A landing run that has ingested every file is still applying them: no close run beside it (two runs writing
    the same replicas could end in the opposite order to their creation: see sensors/landing_zone.py)."""
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()
    platform.replication_close_after(0)
    running = create_run_for_test(
        platform.instance,
        status=dg.DagsterRunStatus.STARTED,
        tags=run_tags(mode="apply", reason=REASON_FILES, objects=["Account"]),
    )
    waiting = evaluate(platform, LANDING)
    assert not waiting.run_requests and f"closing waits for landing run {running.run_id[:8]}" in skipped(waiting)
    platform.instance.report_run_canceled(running)
    [request] = evaluate(platform, LANDING, cursor=waiting.cursor).run_requests
    assert request.run_key.startswith("close-")


def test_reconciliation_sensor_requests_reconcile_and_resync_and_respects_the_budget(platform, sample_dir, tmp_path):
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()
    with Emulator(tmp_path / "org") as emu:
        org = {
            "salesforce": SalesforceResource(
                instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
            )
        }
        resources = {**platform.defs.resources, **org}
        result = evaluate(platform, RECONCILE, resources=resources)
        [request] = result.run_requests  # one run for every replica that needs work: one process, one Spark
        assert set(request.asset_selection) == {replica_key("Contact"), replica_key("Opportunity")}
        modes = {op: c["config"]["mode"] for op, c in request.run_config["ops"].items()}
        assert modes == {
            replica_key("Contact").to_python_identifier(): "reconcile",
            replica_key("Opportunity").to_python_identifier(): "resync",
        }
        assert request.tags[TAG_MODE] == "reconcile+resync"
        assert request.tags[object_tag("Contact")] == request.tags[object_tag("Opportunity")] == "1"

        emu.set_request_budget(daily_request_limit=1000, used=990)
        held = evaluate(platform, RECONCILE, resources=resources)
        assert not held.run_requests and "API budget" in held.skip_reason.skip_message


def skipped(result) -> str:
    return result.skip_reason.skip_message if result.skip_reason else ""


def org_resources(platform: Platform, emu: Emulator) -> dict:
    return {
        **platform.defs.resources,
        "salesforce": SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        ),
    }


def test_a_replica_without_a_table_is_loaded_at_once_and_a_failed_load_is_retried_after_the_backoff(
    tmp_path, spark, sample_dir, monkeypatch
):
    with Emulator(tmp_path / "org") as emu:
        salesforce = SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        )
        platform = Platform(
            tmp_path / "p",
            sample_dir / "describe",
            OBJECTS,
            TEST_SPARK_CONF,
            salesforce=salesforce,
            initial_load=True,
            retry_backoff_seconds=300,
        )
        [request] = evaluate(platform, RECONCILE).run_requests  # no landing file, no event: loaded all the same
        assert set(request.asset_selection) == {replica_key(n) for n in OBJECTS}
        assert {request.tags[work_tag(n)] for n in OBJECTS} == {"initial_load"}

        monkeypatch.setenv("CDC_FAULT_POINT", "resync.before_commit")  # the first load dies before its commit
        started = time.monotonic()
        failed = platform.execute(request)
        monkeypatch.delenv("CDC_FAULT_POINT")
        assert not failed.success and platform.table_version("Account") is None
        later = evaluate(platform, RECONCILE)
        assert not later.run_requests  # not before the backoff, and the skip reason says when
        says = f"retry 1 of initial load of Account after run {failed.run_id[:8]}"
        assert_retry_in(skipped(later), says, 300, started)

        platform.set_options(retry_backoff_seconds=0)
        [retry] = evaluate(platform, RECONCILE).run_requests
        assert retry.run_key != request.run_key and "retry 1" in retry.tags[TAG_REASON]
        assert platform.execute(retry).success
        assert all(platform.table_version(n) is not None for n in OBJECTS)
        assert skipped(evaluate(platform, RECONCILE)).startswith("nothing to do")


def test_landing_files_whose_run_failed_are_requested_again_after_the_backoff(platform, monkeypatch):
    platform.set_options(retry_backoff_seconds=300)
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    first = evaluate(platform, LANDING)
    [request] = first.run_requests
    monkeypatch.setenv("CDC_FAULT_POINT", "ingest.after_read")
    started = time.monotonic()
    failed = platform.execute(request)
    monkeypatch.delenv("CDC_FAULT_POINT")
    assert not failed.success

    waiting = evaluate(platform, LANDING, cursor=first.cursor)
    assert not waiting.run_requests
    assert_retry_in(skipped(waiting), f"retry 1 of 1 landing files after run {failed.run_id[:8]}", 300, started)
    platform.set_options(retry_backoff_seconds=0)
    [retry] = evaluate(platform, LANDING, cursor=waiting.cursor).run_requests
    assert retry.run_key != request.run_key and replica_key("Contact") in retry.asset_selection
    assert platform.execute(retry).success
    assert [r["record_id"] for r in platform.change_events()] == ["003000000000001AAA"]


def test_work_does_not_wait_behind_landing_runs_and_the_skip_reason_says_what_it_waits_for(
    platform, sample_dir, tmp_path
):
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()  # Contact has dirty records, Opportunity a pending resync
    with Emulator(tmp_path / "org") as emu:
        resources = org_resources(platform, emu)
        # Steady traffic: a landing run of every object is always queued.
        create_run_for_test(
            platform.instance,
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags={TAG_REASON: REASON_FILES, **{object_tag(n): "1" for n in OBJECTS}},
        )
        [request] = evaluate(platform, RECONCILE, resources=resources).run_requests
        assert set(request.asset_selection) == {replica_key("Contact"), replica_key("Opportunity")}

        queued = create_run_for_test(
            platform.instance,
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags=request.tags,
            asset_selection=frozenset(request.asset_selection),
        )
        waiting = evaluate(platform, RECONCILE, resources=resources)
        assert not waiting.run_requests
        assert f"resync of Opportunity waiting for run {queued.run_id[:8]} (NOT_STARTED)" in skipped(waiting)
        assert "reconcile of Contact waiting for run" in skipped(waiting)

        platform.instance.report_run_failed(queued)
        backing_off = evaluate(platform, RECONCILE, resources=resources)
        assert not backing_off.run_requests
        assert f"retry 1 of resync of Opportunity after run {queued.run_id[:8]} failed, in" in skipped(backing_off)


def transaction_across_objects(platform: Platform) -> str | None:
    """Land transaction TX creating an Account and a Contact; run what the landing sensor asks: both hold TX."""
    platform.land(
        [
            event("Account", "CREATE", ["001000000000001AAA"], 1_000, tx="TX", seq=1, Name="Acme"),
            event("Contact", "CREATE", ["003000000000001AAA"], 1_000, tx="TX", seq=2, LastName="Lovelace"),
        ]
    )
    result = evaluate(platform, LANDING)
    [request] = result.run_requests
    assert platform.execute(request).success
    assert [platform.materialization_of(n)["held_transactions"] for n in ("Account", "Contact")] == [["TX"]] * 2
    return result.cursor


def assert_applied_together(platform: Platform, run: dg.ExecuteInProcessResult) -> None:
    account, contact = (platform.materialization(run, n) for n in ("Account", "Contact"))
    cut = json.loads(platform.instance.get_run_by_id(run.run_id).tags[TAG_CUT])
    assert account["applied_through"] == contact["applied_through"] == cut["through"]
    assert "TX" not in account["held_transactions"] + contact["held_transactions"]
    assert platform.rows("Account")["001000000000001AAA"]["Name"] == "Acme"
    assert platform.rows("Contact")["003000000000001AAA"]["LastName"] == "Lovelace"


def test_a_transaction_spanning_objects_closes_by_timeout_in_one_run_for_all_of_them(platform):
    transaction_across_objects(platform)
    platform.replication_close_after(0)
    # A run of Account alone (a reconcile run, say) must not close TX for Account only.
    assert platform.execute(dg.RunRequest(asset_selection=[replica_key("Account")])).success
    assert platform.materialization_of("Account")["held_transactions"] == ["TX"]
    assert platform.rows("Account") == {}

    [close] = evaluate(platform, LANDING).run_requests
    assert_applied_together(platform, platform.execute(close))


def test_new_files_that_close_a_held_transaction_bring_every_replica_holding_it_into_the_run(platform):
    cursor = transaction_across_objects(platform)
    platform.land([event("Account", "UPDATE", ["001000000000001AAA"], 2_000, tx="TY", Industry="Energy")])
    [request] = evaluate(platform, LANDING, cursor=cursor).run_requests
    assert replica_key("Contact") in request.asset_selection  # the new file names Account only
    run = platform.execute(request)
    assert_applied_together(platform, run)
    assert platform.materialization(run, "Account")["held_transactions"] == ["TY"]


def test_every_replica_of_a_run_applies_through_the_pinned_cut_even_after_another_run_ingested(platform):
    transaction_across_objects(platform)  # ingest 1: Account and Contact hold TX
    platform.land([event("Account", "UPDATE", ["001000000000001AAA"], 2_000, tx="TY", Industry="Energy")])
    platform.execute(dg.RunRequest(asset_selection=[CHANGE_EVENTS_KEY]))  # another run ingests: TY closes TX
    run_id = str(uuid.uuid4())
    pinned = {"run": run_id, "through": 1, "open_key": "TX", "clock": "2026-01-01T00:00:00+00:00", "reason": "test"}
    job = platform.defs.get_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=platform.instance,
        run_id=run_id,
        tags={TAG_CUT: json.dumps(pinned)},
        asset_selection=[replica_key("Account"), replica_key("Contact")],
    )
    for name in ("Account", "Contact"):  # as the run's first step decided, not the newer ingest
        meta = platform.materialization(result, name)
        assert (meta["applied_through"], meta["held_transactions"]) == (1, ["TX"]), name
    assert platform.rows("Account") == {}


def test_landing_sensor_reports_what_the_zone_holds_but_never_reads_and_fails_a_check_while_it_is_there(platform):
    """Files the zone ignores are counted in an observation of landing_zone and fail landing_zone_files_read,
    named (control characters escaped); the report repeats only when the survey changes."""
    zone = platform.landing
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    for name in ("x.JSONL", "x.ndjson", "x.json", "bad\nname.jsonl.txt"):
        (zone / name).write_text("{}\n")
    (zone / "_fresh.jsonl").write_text("{}\n")  # in flight: a writer is busy with it
    (zone / "_stale.jsonl").write_text("{}\n")
    os.utime(zone / "_stale.jsonl", (time.time() - 7200, time.time() - 7200))
    (zone / "_subscriber").mkdir()  # a hidden folder (the subscriber's state) is not looked into
    (zone / "_subscriber" / "dead_letters-x.jsonl").write_text("{}\n")
    os.utime(zone / "_subscriber" / "dead_letters-x.jsonl", (0, 0))
    (zone / "link.jsonl").symlink_to(zone / "a.jsonl")
    os.mkfifo(zone / "pipe.jsonl")

    first = evaluate(platform, LANDING)
    observation, check = first.asset_events
    assert observation.asset_key == check.asset_key == dg.AssetKey("landing_zone")
    assert check.check_name == "landing_zone_files_read" and not check.passed
    counts = {k: v.value for k, v in observation.metadata.items()}
    assert counts == {
        "event_files": 1,
        "entries_not_read": 7,
        "files_not_events": 4,
        "symlinks": 1,
        "not_regular_files": 1,
        "names_not_utf8": 0,
        "inflight_stale": 1,
    }
    # Each entry named with what to do about it, and that nothing else will.
    for name, why in [("bad\\nname.jsonl.txt", NOT_EVENTS), ("link.jsonl", LINK), ("_stale.jsonl", STALE_INFLIGHT)]:
        assert f"{name} ({why}: {FIXES[why]})" in check.description
    assert "Nothing removes them: this check fails until they are gone" in check.description
    assert "\n" not in check.description and "and 2 more" in check.description
    [request] = first.run_requests  # the event file still flows
    assert set(request.asset_selection) == landing("Contact")

    unchanged = json.loads(first.cursor) | {"surveyed_at": 0}  # a survey due again, finding the same
    assert evaluate(platform, LANDING, cursor=json.dumps(unchanged)).asset_events == []

    for name in ("x.JSONL", "x.ndjson", "x.json", "bad\nname.jsonl.txt", "_stale.jsonl", "link.jsonl", "pipe.jsonl"):
        (zone / name).unlink()
    cleared = evaluate(platform, LANDING, cursor=json.dumps(unchanged))
    _, check = cleared.asset_events
    assert check.passed and check.description == "every entry of the landing zone is read (1 event files)"
