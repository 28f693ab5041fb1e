"""The shipped dagster.yaml (what `make run` and the e2e tests put in DAGSTER_HOME) is a real instance config with
the settings exactly-once relies on: queued runs, one slot per pool, and a pool per table writer."""

from __future__ import annotations

import dagster as dg

from cdc_assets.names import TAG_FILES, TAG_UPKEEP
from cdc_assets.upkeep.jobs import REPLICAS
from definitions import build_defs
from demo.instance import INSTANCE_YAML, open_instance, write_dagster_home


def test_the_shipped_dagster_yaml_queues_runs_and_gives_every_pool_one_slot(tmp_path):
    home = write_dagster_home(tmp_path / "home")
    assert (home / "dagster.yaml").read_text() == INSTANCE_YAML.read_text()
    with open_instance(home) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.run_queue_config.tag_concurrency_limits == [
            {"key": TAG_FILES, "limit": 1},
            {"key": TAG_UPKEEP, "value": REPLICAS, "limit": 1},
        ]


def test_every_table_writer_has_its_own_pool(tmp_path):
    config = tmp_path / "replication.yaml"
    config.write_text("objects: [Account, Contact]\n")
    defs = build_defs(config_path=config, landing_path=str(tmp_path / "l"), warehouse_root=str(tmp_path / "w"))
    pools = {
        key.to_user_string(): node.pool
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for key in a.keys
        for node in [a.node_def]
    }
    assert pools == {
        "change_events": "change_events",
        "salesforce/Account": "replica_Account",
        "salesforce/Contact": "replica_Contact",
        # the per-object slices of change_events come out of its own step (cdc_assets/assets.py)
        "events/Account_events": "change_events",
        "events/Contact_events": "change_events",
    }


def test_the_shipped_dagster_yaml_opens_the_ui_without_a_first_visit_dialog(tmp_path):
    # The webserver shows its community dialog when `nux_enabled` and no `.nux/nux.yaml` was written yet: a fresh
    # home has none, so only the setting keeps a new user's first page clear.
    home = write_dagster_home(tmp_path / "home")
    with open_instance(home) as instance:
        assert instance.nux_enabled is False
    assert not (home / ".nux").exists()


def test_the_shipped_dagster_yaml_ends_runs_left_by_a_crash_but_never_a_slow_one(tmp_path):
    # README "Dagster instance": Dagster's monitoring ends runs stuck STARTING or CANCELING and frees the slots of
    # ended runs; no runtime limit (a 10M-row resync is slow, not dead); no run_retries (the sensors retry work).
    home = write_dagster_home(tmp_path / "home")
    with open_instance(home) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 180
        assert instance.run_monitoring_max_runtime_seconds == 0
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
        assert instance.run_monitoring_poll_interval_seconds <= 15
        assert not instance.run_retries_enabled
        assert not instance.run_launcher.supports_check_run_worker_health  # hence sensors/run_liveness.py
    defs = build_defs(
        config_path=_config(tmp_path), landing_path=str(tmp_path / "l"), warehouse_root=str(tmp_path / "w")
    )
    assert defs.get_sensor_def("run_liveness_sensor")


def _config(tmp_path):
    config = tmp_path / "replication.yaml"
    config.write_text("objects: [Account]\n")
    return config
