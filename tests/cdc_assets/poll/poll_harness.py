"""Helpers of the polling tests: a platform whose objects are polled, one run of its replicas, the org compared."""

from __future__ import annotations

import dagster as dg
import yaml
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import replica_key
from definitions import build_defs
from replication.poll.run import poll_state as read_poll_state
from replication.state import PollState
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator

POLLED = ["Account", "Contact"]
# Small pages so that bursts span several REST limits and Bulk pages; every run compares Ids (purges).
OPTIONS = {"poll_overlap": 2, "poll_rest_max_records": 50, "poll_page_size": 40, "hard_delete_check_every": 0}


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


def set_modes(platform: Platform, modes: dict[str, str]) -> None:
    """Rewrite replication.yaml with each object's mode and rebuild the definitions (as a deploy would)."""
    config = yaml.safe_load(platform.config.read_text())
    for entry in config["objects"]:
        entry["mode"] = modes.get(entry["name"], entry.get("mode", "cdc"))
    platform.config.write_text(yaml.safe_dump(config))
    platform.defs = build_defs(
        config_path=platform.config,
        landing_path=str(platform.landing),
        warehouse_root=str(platform.warehouse),
        spark_conf=platform.spark_conf,
        salesforce=platform.salesforce,
    )


def poll_platform(tmp_path, emu: Emulator, objects=POLLED, **options) -> Platform:
    platform = Platform(
        tmp_path / "p",
        None,
        objects,
        TEST_SPARK_CONF,
        salesforce=resource(emu),
        initial_load=True,
        **(OPTIONS | options),
    )
    set_modes(platform, dict.fromkeys(objects, "poll"))
    return platform


def run_replicas(
    platform: Platform, objects=POLLED, *, raise_on_error: bool = True, checks: bool = False, **config
) -> dg.ExecuteInProcessResult:
    """One run of the replicas alone (what a poll sensor requests): no change_events, no Spark; with `checks`, their
    asset checks too."""
    keys = [replica_key(o) for o in objects]
    assets = [a for a in platform.executable_assets() if set(a.keys) & set(keys)]
    if checks:
        assets += [c for c in platform.defs.asset_checks or [] if {k.asset_key for k in c.check_keys} & set(keys)]
    ops = {replica_key(o).to_python_identifier(): {"config": config} for o in objects} if config else {}
    return dg.materialize(
        assets,
        resources=platform.defs.resources,
        instance=platform.instance,
        selection=keys,
        run_config={"ops": ops},
        raise_on_error=raise_on_error,
    )


def assert_equal_to_org(platform: Platform, emu: Emulator, objects=POLLED) -> None:
    for name in objects:
        assert differences(emu, name, platform.rows(name)) == [], name


def update(emu: Emulator, name: str, record_id: str, **values) -> None:
    with emu.store.transaction() as txn:
        txn.update(name, record_id, values)


def poll_state(platform: Platform, name: str) -> PollState:
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    return read_poll_state(warehouse, warehouse.table(name)) or PollState()
