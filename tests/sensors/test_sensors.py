"""Both sensors, evaluated with Dagster's real sensor context against a real instance and real tables."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test

from cdc_assets.assets import CHANGE_EVENTS_KEY, replica_key
from settings import TEST_SPARK_CONF
from event_lines import event
from harness import Platform, load_lines
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from sensors.landing_zone import SENSOR_NAME as LANDING
from sensors.reconciliation import SENSOR_NAME as RECONCILE, TAG_MODE, object_tag

OBJECTS = ["Account", "Contact", "Opportunity"]


def evaluate(platform: Platform, name: str, cursor: str | None = None, resources=None):
    context = dg.build_sensor_context(instance=platform.instance, cursor=cursor, definitions=platform.defs,
                                      resources=resources or platform.defs.resources)
    return platform.defs.get_sensor_def(name)(context)


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)


def test_landing_sensor_requests_one_run_per_new_file_set(platform):
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    first = evaluate(platform, LANDING)
    [request] = first.run_requests
    assert set(request.asset_selection) == {CHANGE_EVENTS_KEY, replica_key("Contact")}
    assert request.tags[object_tag("Contact")] == "1"

    again = evaluate(platform, LANDING, cursor=first.cursor)  # same files, run not finished yet
    assert not again.run_requests

    platform.land([event("Account", "CREATE", ["001000000000001AAA"], 2, Name="Acme")], name="b.jsonl")
    more = evaluate(platform, LANDING, cursor=again.cursor)
    [second] = more.run_requests
    assert second.run_key != request.run_key
    assert set(second.asset_selection) == {CHANGE_EVENTS_KEY, replica_key("Account")}


def test_landing_sensor_leaves_new_files_to_a_queued_landing_run_that_covers_them(platform):
    platform.land([event("Contact", "CREATE", ["003000000000001AAA"], 1, LastName="Lovelace")], name="a.jsonl")
    first = evaluate(platform, LANDING)
    [request] = first.run_requests
    # Not started yet (QUEUED would need a code location origin; the sensor treats both alike).
    create_run_for_test(platform.instance, status=dg.DagsterRunStatus.NOT_STARTED, tags=request.tags,
                        asset_selection=frozenset(request.asset_selection))

    platform.land([event("Contact", "UPDATE", ["003000000000001AAA"], 2, LastName="King")], name="b.jsonl")
    covered = evaluate(platform, LANDING, cursor=first.cursor)
    assert not covered.run_requests  # the queued run ingests b.jsonl too when it starts

    platform.land([event("Account", "CREATE", ["001000000000001AAA"], 3, Name="Acme")], name="c.jsonl")
    [other] = evaluate(platform, LANDING, cursor=covered.cursor).run_requests
    assert set(other.asset_selection) == {CHANGE_EVENTS_KEY, replica_key("Account")}


def test_landing_sensor_closes_the_newest_transaction_after_the_timeout(platform, sample_dir):
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()
    quiet = evaluate(platform, LANDING)
    assert not quiet.run_requests  # ingested; the newest transaction is only seconds old
    platform.replication_close_after(0)
    closing = evaluate(platform, LANDING, cursor=quiet.cursor)
    [request] = closing.run_requests
    assert request.run_key.startswith("close-")
    assert not evaluate(platform, LANDING, cursor=closing.cursor).run_requests


def test_reconciliation_sensor_requests_reconcile_and_resync_and_respects_the_budget(platform, sample_dir,
                                                                                     tmp_path):
    platform.land(load_lines(sample_dir / "events.jsonl"))
    platform.run()
    with Emulator(tmp_path / "org") as emu:
        org = {"salesforce": SalesforceResource(instance_url=emu.instance_url, access_token=emu.token,
                                                ca_bundle=str(emu.ca_file))}
        resources = {**platform.defs.resources, **org}
        result = evaluate(platform, RECONCILE, resources=resources)
        [request] = result.run_requests  # one run for every replica that needs work: one process, one Spark
        assert set(request.asset_selection) == {replica_key("Contact"), replica_key("Opportunity")}
        modes = {op: c["config"]["mode"] for op, c in request.run_config["ops"].items()}
        assert modes == {replica_key("Contact").to_python_identifier(): "reconcile",
                         replica_key("Opportunity").to_python_identifier(): "resync"}
        assert request.tags[TAG_MODE] == "reconcile+resync"
        assert request.tags[object_tag("Contact")] == request.tags[object_tag("Opportunity")] == "1"

        emu.set_request_budget(daily_request_limit=1000, used=990)
        held = evaluate(platform, RECONCILE, resources=resources)
        assert not held.run_requests and "API budget" in held.skip_reason.skip_message
