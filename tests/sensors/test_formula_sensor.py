"""The formulas sensor (one for every object keeping formula fields), evaluated with Dagster's real sensor context
against an emulator: one refresh run per cycle for the objects due, none for an object with a run in flight, none
while the API budget is low."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test
from harness import write_config
from subscriber_harness import resource

from cdc_assets.names import TAG_MODE, object_tag, replica_key
from definitions import build_defs
from salesforce_emulator import Emulator
from sensors.formulas import SENSOR_NAME


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        yield emu


def formula_defs(tmp_path, emu: Emulator) -> dg.Definitions:
    config = write_config(tmp_path / "replication.yaml", None, ["Account", "Contact", "Lead"], initial_load=True)
    raw = yaml.safe_load(config.read_text())
    for entry in raw["objects"][1:]:
        entry |= {"formulas": {"refresh_every": "1h", "full_every": "1d"}}
    config.write_text(yaml.safe_dump(raw))
    return build_defs(
        config_path=config,
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
        salesforce=resource(emu),
    )


def evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources={"salesforce": defs.resources["salesforce"]}
    )  # no Spark
    return defs.get_sensor_def(SENSOR_NAME)(context)


def refreshed_in(request: dg.RunRequest) -> list[str]:
    names = [key.path[-1] for key in request.asset_selection or []]
    ops = request.run_config["ops"]
    assert ops == {replica_key(n).to_python_identifier(): {"config": {"mode": "formulas"}} for n in names}
    assert request.tags[TAG_MODE] == "formulas" and all(request.tags[object_tag(n)] == "1" for n in names)
    return names


def test_one_sensor_refreshes_every_object_keeping_formulas_held_back_like_polling(tmp_path, org):
    defs = formula_defs(tmp_path, org)
    instance = dg.DagsterInstance.ephemeral()
    names = {s.name for s in defs.sensors}
    assert SENSOR_NAME in names and not any(n.startswith("formulas_") and n != SENSOR_NAME for n in names)
    specs = {(c.asset_key.path[-1], c.name) for checks in defs.asset_checks for c in checks.check_specs}
    assert ("Contact", "formulas_fresh") in specs and ("Account", "formulas_fresh") not in specs

    result = evaluate(defs, instance)  # no cursor: every object due at once
    [request] = result.run_requests
    assert refreshed_in(request) == ["Contact", "Lead"]  # Account keeps no formulas
    assert request.run_key.startswith("formulas-") and evaluate(defs, instance).run_requests[0].run_key == (
        request.run_key
    )
    assert not evaluate(defs, instance, cursor=result.cursor).run_requests  # same window

    create_run_for_test(
        instance, job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED, tags={object_tag("Contact"): "1"}
    )
    [lead] = evaluate(defs, instance).run_requests
    assert refreshed_in(lead) == ["Lead"]
    queued = evaluate(defs, instance, cursor=json.dumps({"Lead": json.loads(result.cursor)["Lead"]}))
    assert not queued.run_requests and "in flight" in queued.skip_reason.skip_message

    org.set_request_budget(daily_request_limit=1000, used=990)
    held = evaluate(defs, dg.DagsterInstance.ephemeral())
    assert not held.run_requests and "API budget" in held.skip_reason.skip_message
