"""The cycle the scheduled sensors share (sensors/cycle.py), through the describe sensor, evaluated with Dagster's real
sensor context against an emulator: one sensor for every object, one run for the objects due, split by the per-run
maximum, an object with a run in flight or paused left for later, a deterministic run key."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from dagster._core.storage.tags import PRIORITY_TAG
from dagster._core.test_utils import create_run_for_test
from harness import write_config
from subscriber_harness import resource

from cdc_assets.names import TAG_MODE, TAG_REASON, object_tag, replica_key
from cdc_assets.operate.pause import set_paused
from definitions import build_defs
from salesforce_emulator import Emulator
from sensors.describe import SENSOR_NAME

OBJECTS = ["Account", "Contact", "Lead"]
HOUR = 3600


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        yield emu


def describe_defs(tmp_path, emu: Emulator, **options) -> dg.Definitions:
    config = write_config(tmp_path / "replication.yaml", None, OBJECTS, initial_load=True, **options)
    return build_defs(
        config_path=config,
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
        salesforce=resource(emu),
    )


def evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: dict[str, int] | None = None):
    context = dg.build_sensor_context(
        instance=instance,
        cursor=json.dumps(cursor) if cursor is not None else None,
        definitions=defs,
        resources={"salesforce": defs.resources["salesforce"]},
    )  # no Spark
    return defs.get_sensor_def(SENSOR_NAME)(context)


def described_in(request: dg.RunRequest) -> list[str]:
    """The objects a request carries, each in its asset selection, op config (mode describe) and object tag."""
    names = [key.path[-1] for key in request.asset_selection or []]
    ops = request.run_config["ops"]
    assert ops == {replica_key(n).to_python_identifier(): {"config": {"mode": "describe"}} for n in names}
    assert request.tags[TAG_MODE] == "describe" and all(request.tags[object_tag(n)] == "1" for n in names)
    return names


def a_window_ago() -> dict[str, int]:
    """A cursor whose every object was last described a window ago: all due."""
    return dict.fromkeys(OBJECTS, 0)


def test_one_describe_sensor_asks_for_one_run_carrying_every_object_due(tmp_path, org):
    defs = describe_defs(tmp_path, org)
    names = {s.name for s in defs.sensors}
    assert SENSOR_NAME in names and not any(n.startswith("describe_") and n != SENSOR_NAME for n in names)
    instance = dg.DagsterInstance.ephemeral()

    started = evaluate(defs, instance)  # just started: every object's count starts, no run
    assert not started.run_requests and set(json.loads(started.cursor)) == set(OBJECTS)
    result = evaluate(defs, instance, a_window_ago())
    [request] = result.run_requests
    assert described_in(request) == OBJECTS and request.tags[TAG_REASON] == "describe() again: 3 objects due"
    # Background work: Dagster's queue launches a poll (0) or landing run (10) queued after it first.
    assert int(request.tags[PRIORITY_TAG]) < 0
    windows = json.loads(result.cursor)
    assert set(windows) == set(OBJECTS) and all(w > 0 for w in windows.values())
    assert not evaluate(defs, instance, windows).run_requests  # every object described in its window


def test_a_tick_evaluated_twice_asks_for_the_same_run_key_and_a_new_window_for_another(tmp_path, org):
    defs = describe_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    [first] = evaluate(defs, instance, a_window_ago()).run_requests
    [again] = evaluate(defs, instance, a_window_ago()).run_requests
    assert again.run_key == first.run_key and first.run_key.startswith("describe-")

    # Contact alone due (the others described in this window): another run, another key.
    current = json.loads(evaluate(defs, instance, a_window_ago()).cursor)
    [contact] = evaluate(defs, instance, current | {"Contact": 0}).run_requests
    assert described_in(contact) == ["Contact"] and contact.run_key != first.run_key


def test_an_object_with_a_run_in_flight_or_paused_waits_and_is_asked_once_it_can_be(tmp_path, org):
    defs = describe_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    create_run_for_test(
        instance, job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED, tags={object_tag("Account"): "1"}
    )
    set_paused(instance, "Lead", True, at="2026-01-01T00:00:00+00:00")
    result = evaluate(defs, instance, a_window_ago())
    [request] = result.run_requests
    assert described_in(request) == ["Contact"]
    assert json.loads(result.cursor)["Account"] == 0 and json.loads(result.cursor)["Lead"] == 0  # not asked yet

    waiting = evaluate(defs, instance, json.loads(result.cursor))
    assert not waiting.run_requests
    assert "2 objects due, none ready: 1 paused" in waiting.skip_reason.skip_message


def test_a_cycle_is_split_in_runs_of_at_most_objects_per_run(tmp_path, org):
    defs = describe_defs(tmp_path, org, objects_per_run=2)
    requests = evaluate(defs, dg.DagsterInstance.ephemeral(), a_window_ago()).run_requests
    assert [described_in(r) for r in requests] == [["Account", "Contact"], ["Lead"]]
    assert len({r.run_key for r in requests}) == 2


def test_every_object_waits_while_the_api_budget_is_nearly_spent(tmp_path, org):
    defs = describe_defs(tmp_path, org)
    org.set_request_budget(daily_request_limit=1000, used=990)
    held = evaluate(defs, dg.DagsterInstance.ephemeral(), a_window_ago())
    assert not held.run_requests and "API budget" in held.skip_reason.skip_message
    assert json.loads(held.cursor) == a_window_ago()  # asked once the budget allows


def test_no_describe_sensor_when_no_object_asks_describe_again(tmp_path, org):
    defs = describe_defs(tmp_path, org, describe_every=None)
    assert SENSOR_NAME not in {s.name for s in defs.sensors}
