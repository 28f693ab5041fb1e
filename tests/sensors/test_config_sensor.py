"""replication.yaml: runs use what their code location loaded; an edit since shows on the config sensor's tick.

A typo saved in replication.yaml before the definitions are reloaded must not fail runs with only "Could not load
job definition" (a run that re-imported the definitions would re-read the file): a location keeps the text it
loaded (replication.config.load_location_config) and the processes it spawns use it; the
sensor `replication_config_sensor` (sensors/config.py) fails its tick with the file's errors, or asks for a
reload after a valid edit. The run-worker test spawns a process the way Dagster's code server starts a run
(multiprocessing, spawn) and imports `definitions` there, as a run worker does.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import dagster as dg
import pytest
from settings import SAMPLE

from definitions import build_defs
from replication.config import LOADED_CONFIG_ENV, ConfigError, load_location_config
from sensors.config import CONFIG_SENSOR

TYPO = "objects:\n  - name: Account\n    pol_interval: 60\n"


def _config(objects: list[str]) -> str:
    lines = ["options:", "  initial_load: false", "objects:"]
    lines += [f"  - name: {o}\n    describe: {SAMPLE / 'describe' / (o + '.json')}" for o in objects]
    return "\n".join(lines) + "\n"


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "replication.yaml"
    path.write_text(_config(["Account", "Contact"]))
    monkeypatch.setenv("CDC_CONFIG", str(path))
    monkeypatch.setenv("CDC_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("CDC_LANDING_ZONE", str(tmp_path / "landing"))
    monkeypatch.delenv(LOADED_CONFIG_ENV, raising=False)
    return path


def _run_worker_replicas(queue) -> None:  # a spawned process: imports the definitions as a run worker does
    import definitions

    queue.put(
        sorted(k.to_user_string() for k in definitions.defs().resolve_all_asset_keys() if k.path[0] == "salesforce")
    )


def _spawned_replicas() -> list[str]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=_run_worker_replicas, args=(queue,))
    worker.start()
    replicas = queue.get(timeout=240)
    worker.join(60)
    assert worker.exitcode == 0
    return replicas


def test_a_run_uses_the_configuration_its_code_location_loaded(config_file: Path):
    loaded = load_location_config()
    assert loaded.config.names == ["Account", "Contact"]
    config_file.write_text(TYPO)  # saved before any reload: a run started now must not read it
    assert _spawned_replicas() == ["salesforce/Account", "salesforce/Contact"]
    config_file.write_text(_config(["Account"]))  # a valid edit is not applied half-way either
    assert _spawned_replicas() == ["salesforce/Account", "salesforce/Contact"]


def test_a_new_location_reads_the_file_again(config_file: Path, monkeypatch: pytest.MonkeyPatch):
    load_location_config()
    config_file.write_text(_config(["Account"]))
    monkeypatch.delenv(LOADED_CONFIG_ENV)  # a reload starts a code server from dagster dev's clean environment
    assert load_location_config().config.names == ["Account"]
    config_file.write_text(TYPO)
    monkeypatch.delenv(LOADED_CONFIG_ENV)
    with pytest.raises(ConfigError, match=r"objects\[0\]\.pol_interval: unknown key \(did you mean poll_interval"):
        load_location_config()


def _tick(defs: dg.Definitions) -> dg.SkipReason:
    sensor = defs.get_sensor_def(CONFIG_SENSOR)
    with dg.instance_for_test() as instance:
        result = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    assert result.run_requests == []
    return result.skip_message


def test_the_config_sensor_tick_reports_an_edit_since_the_location_loaded(config_file: Path):
    defs = build_defs(loaded=load_location_config())
    assert _tick(defs).endswith("as loaded")
    config_file.write_text(_config(["Account"]))
    assert "changed since the code location loaded it: reload the code location" in _tick(defs)


def test_an_invalid_edit_fails_the_config_sensor_tick_with_its_errors(config_file: Path):
    defs = build_defs(loaded=load_location_config())
    config_file.write_text(TYPO)
    with pytest.raises(ConfigError) as failed:  # the daemon records the tick as failed, with this text
        _tick(defs)
    message = str(failed.value)
    assert "objects[0].pol_interval: unknown key (did you mean poll_interval?)" in message
    assert "runs keep the configuration loaded before" in message and "Reload" in message


def _grandchild_replicas(queue) -> None:  # a child that starts its own child: e.g. dagster dev and its code server
    context = multiprocessing.get_context("spawn")
    inner = context.Queue()
    worker = context.Process(target=_run_worker_replicas, args=(inner,))
    worker.start()
    queue.put(inner.get(timeout=240))
    worker.join(60)


def test_only_the_locations_own_run_workers_take_its_text(config_file: Path):
    load_location_config()
    config_file.write_text(_config(["Account"]))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_grandchild_replicas, args=(queue,))
    process.start()
    assert queue.get(timeout=300) == ["salesforce/Account"]  # a new code location further down reads the file
    process.join(60)
