"""The poll sensor (one for every `source: poll` object), evaluated with Dagster's real sensor context against an
emulator."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from dagster._core.storage.tags import PRIORITY_TAG
from dagster._core.test_utils import create_run_for_test
from harness import write_config

from cdc_assets.names import TAG_MODE, object_tag, replica_key
from definitions import build_defs
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from sensors.poll import SENSOR_NAME
from sensors.reconciliation import SENSOR_NAME as RECONCILE


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        yield emu


def poll_defs(tmp_path, emu: Emulator, **options) -> dg.Definitions:
    config = write_config(
        tmp_path / "replication.yaml", None, ["Account", "Contact", "Lead"], initial_load=True, **options
    )
    raw = yaml.safe_load(config.read_text())
    for entry, interval in zip(raw["objects"][:2], (60, 3600), strict=True):
        entry |= {"source": "poll", "poll_interval": interval}
    config.write_text(yaml.safe_dump(raw))
    return build_defs(
        config_path=config,
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
        salesforce=SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        ),
    )


def evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources={"salesforce": defs.resources["salesforce"]}
    )  # no Spark
    return defs.get_sensor_def(SENSOR_NAME)(context)


def polled_in(request: dg.RunRequest) -> set[str]:
    ops = request.run_config["ops"]
    assert all(op["config"]["mode"] == "poll" for op in ops.values())
    return {key.path[-1] for key in request.asset_selection or []}


def test_one_sensor_asks_for_one_run_carrying_every_polled_object_due(tmp_path, org):
    defs = poll_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    names = {s.name for s in defs.sensors}
    assert SENSOR_NAME in names and RECONCILE in names and not any(n.startswith("poll_A") for n in names)
    tags = {key: a.tags_by_key[key] for a in defs.assets if isinstance(a, dg.AssetsDefinition) for key in a.keys}
    assert tags[replica_key("Account")][TAG_MODE] == "poll" and tags[replica_key("Lead")][TAG_MODE] == "cdc"

    result = evaluate(defs, instance)
    [request] = result.run_requests
    assert polled_in(request) == {"Account", "Contact"}  # the CDC object is not polled
    assert request.tags[TAG_MODE] == "poll" and request.tags[object_tag("Contact")] == "1"
    assert int(request.tags.get(PRIORITY_TAG, "0")) == 0  # above the describe and formula runs (sensors/cycle.py)
    assert evaluate(defs, instance).run_requests[0].run_key == request.run_key  # a tick evaluated twice: one run
    assert not evaluate(defs, instance, cursor=result.cursor).run_requests  # both polled in their windows
    # A window that moved on (Account's 60 s; Contact's hour has not): only Account is due.
    cursor = json.loads(result.cursor) | {"Account": json.loads(result.cursor)["Account"] - 1}
    [again] = evaluate(defs, instance, cursor=json.dumps(cursor)).run_requests
    assert polled_in(again) == {"Account"} and again.run_key != request.run_key


def test_the_initial_load_of_a_polled_object_is_its_first_poll_and_the_reconciliation_sensor_leaves_it_alone(
    tmp_path, org
):
    defs = poll_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources)
    [load] = defs.get_sensor_def(RECONCILE)(context).run_requests
    assert {key.path[-1] for key in load.asset_selection} == {"Lead"}  # only the CDC object: no table, no event
    [first] = evaluate(defs, instance).run_requests
    assert polled_in(first) == {"Account", "Contact"}  # no table either: the poll loads them


def test_an_object_with_a_run_in_flight_waits_and_a_cycle_is_split_in_runs_of_at_most_so_many(tmp_path, org):
    defs = poll_defs(tmp_path, org, poll_objects_per_run=1)
    instance = dg.DagsterInstance.ephemeral()
    assert [polled_in(r) for r in evaluate(defs, instance).run_requests] == [{"Account"}, {"Contact"}]

    create_run_for_test(
        instance, job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED, tags={object_tag("Account"): "1"}
    )
    result = evaluate(defs, instance)
    assert [polled_in(r) for r in result.run_requests] == [{"Contact"}]
    assert "Account" not in json.loads(result.cursor)  # asked again once its run is done

    org.set_request_budget(daily_request_limit=1000, used=990)
    held = evaluate(defs, dg.DagsterInstance.ephemeral())
    assert not held.run_requests and "API budget" in held.skip_reason.skip_message
