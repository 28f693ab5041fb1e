"""The formula sensors (one per object keeping formula fields), evaluated with Dagster's real sensor context against
an emulator: a refresh run per window, none while a run of the object is in flight or the API budget is low."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test
from harness import write_config
from subscriber_harness import resource

from cdc_assets.names import TAG_MODE, object_tag, replica_key
from definitions import build_defs
from salesforce_emulator import Emulator
from sensors.formulas import sensor_name


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        yield emu


def formula_defs(tmp_path, emu: Emulator) -> dg.Definitions:
    config = write_config(tmp_path / "replication.yaml", None, ["Account", "Contact"], initial_load=True)
    raw = yaml.safe_load(config.read_text())
    raw["objects"][1] |= {"formulas": {"refresh_every": "15m", "full_every": "1d"}}
    config.write_text(yaml.safe_dump(raw))
    return build_defs(
        config_path=config,
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
        salesforce=resource(emu),
    )


def evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, name: str, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources={"salesforce": defs.resources["salesforce"]}
    )  # no Spark
    return defs.get_sensor_def(name)(context)


def test_an_object_keeping_formulas_has_a_refresh_sensor_held_back_like_polling(tmp_path, org):
    defs = formula_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    names = {s.name for s in defs.sensors}
    assert sensor_name("Contact") in names and sensor_name("Account") not in names
    specs = {
        c.name for checks in defs.asset_checks for c in checks.check_specs if c.asset_key == replica_key("Contact")
    }
    assert "formulas_fresh" in specs

    result = evaluate(defs, instance, sensor_name("Contact"))
    [request] = result.run_requests
    assert request.asset_selection == [replica_key("Contact")] and request.run_key.startswith("formulas-Contact-")
    assert request.tags[TAG_MODE] == "formulas" and request.tags[object_tag("Contact")] == "1"
    assert request.run_config["ops"][replica_key("Contact").to_python_identifier()]["config"]["mode"] == "formulas"
    assert not evaluate(defs, instance, sensor_name("Contact"), cursor=result.cursor).run_requests  # same window

    create_run_for_test(
        instance, job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED, tags={object_tag("Contact"): "1"}
    )
    queued = evaluate(defs, instance, sensor_name("Contact"))
    assert not queued.run_requests and "in flight" in queued.skip_reason.skip_message

    org.set_request_budget(daily_request_limit=1000, used=990)
    held = evaluate(defs, dg.DagsterInstance.ephemeral(), sensor_name("Contact"))
    assert not held.run_requests and "API budget" in held.skip_reason.skip_message
