"""The poll sensors (one per `mode: poll` object), evaluated with Dagster's real sensor context against an emulator."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test
from harness import write_config

from cdc_assets.assets import TAG_MODE as ASSET_TAG_MODE
from cdc_assets.assets import replica_key
from cdc_assets.run_tags import TAG_MODE, object_tag
from definitions import build_defs
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from sensors.poll import sensor_name
from sensors.reconciliation import SENSOR_NAME as RECONCILE


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        yield emu


def poll_defs(tmp_path, emu: Emulator) -> dg.Definitions:
    config = write_config(tmp_path / "replication.yaml", None, ["Account", "Contact"], initial_load=True)
    raw = yaml.safe_load(config.read_text())
    raw["objects"][0] |= {"mode": "poll", "poll_interval": 60}
    config.write_text(yaml.safe_dump(raw))
    return build_defs(
        config_path=config,
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
        salesforce=SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        ),
    )


def evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, name: str, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources={"salesforce": defs.resources["salesforce"]}
    )  # no Spark
    return defs.get_sensor_def(name)(context)


def test_a_polled_object_has_its_own_sensor_tagged_poll_and_held_back_like_reconciliation(tmp_path, org):
    defs = poll_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    names = {s.name for s in defs.sensors}
    assert sensor_name("Account") in names and sensor_name("Contact") not in names and RECONCILE in names
    tags = {key: a.tags_by_key[key] for a in defs.assets if isinstance(a, dg.AssetsDefinition) for key in a.keys}
    assert tags[replica_key("Account")][ASSET_TAG_MODE] == "poll"
    assert tags[replica_key("Contact")][ASSET_TAG_MODE] == "cdc"

    result = evaluate(defs, instance, sensor_name("Account"))
    [request] = result.run_requests
    assert request.asset_selection == [replica_key("Account")]
    assert request.tags[TAG_MODE] == "poll" and request.tags[object_tag("Account")] == "1"
    assert request.run_config["ops"][replica_key("Account").to_python_identifier()]["config"]["mode"] == "poll"
    assert request.run_key.startswith("poll-Account-")
    again = evaluate(defs, instance, sensor_name("Account"), cursor=result.cursor)  # the same window: no new run
    assert not again.run_requests

    create_run_for_test(
        instance, job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED, tags={object_tag("Account"): "1"}
    )
    queued = evaluate(defs, instance, sensor_name("Account"))
    assert not queued.run_requests and "in flight" in queued.skip_reason.skip_message

    org.set_request_budget(daily_request_limit=1000, used=990)
    held = evaluate(defs, dg.DagsterInstance.ephemeral(), sensor_name("Account"))
    assert not held.run_requests and "API budget" in held.skip_reason.skip_message
