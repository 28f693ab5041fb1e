"""A damaged landing file asks a resync of the objects the file names, at most once per object per
`damaged_resync_every` (replication/damaged.py): against the real HTTPS emulator, real Delta tables, Dagster's real
materialize() and the real reconciliation sensor. An overflow from the org is never delayed."""

from __future__ import annotations

import gzip
import time
from datetime import datetime

import dagster as dg
import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import NO_PENDING_RESYNC
from cdc_assets.names import replica_key, work_tag
from replication.config import load_config
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.reconciliation import SENSOR_NAME as RECONCILE
from sensors.work import plan
from shared.names import OVERFLOW_ID

pytestmark = pytest.mark.slow

OBJECTS = ["Account", "Contact"]


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:
        Workload(emu, seed=11).build_org(accounts=4)
        yield emu


@pytest.fixture
def platform(tmp_path, org, spark):
    salesforce = SalesforceResource(instance_url=org.instance_url, access_token=org.token, ca_bundle=str(org.ca_file))
    platform = Platform(tmp_path / "p", None, OBJECTS, TEST_SPARK_CONF, salesforce=salesforce, initial_load=True)
    platform.run()  # the initial load of both: a resync, but not one for damaged files
    return platform


def land_cut_gzip(platform: Platform, org: Emulator, name: str) -> None:
    """A gzip of Account's events cut short: its lost part names no object, its readable lines name Account only."""
    ids, now_ms = [r["Id"] for r in org.store.snapshot("Account")], int(time.time() * 1000)
    lines = [event("Account", "UPDATE", [ids[n % len(ids)]], now_ms + n, Rating="Hot") for n in range(400)]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    (platform.landing / name).write_bytes(packed[: len(packed) // 2])


def reconcile_tick(platform: Platform) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=platform.instance, definitions=platform.defs, resources=platform.defs.resources
    )
    return platform.defs.get_sensor_def(RECONCILE)(context)


def resync_of_account_at_once(platform: Platform) -> None:
    """The sensor asks one run: a resync of Account alone, which succeeds."""
    [request] = reconcile_tick(platform).run_requests
    assert request.asset_selection == [replica_key("Account")] and request.tags[work_tag("Account")] == "resync"
    assert platform.execute(request, checks=True).success


def deferred_damage(platform: Platform, org: Emulator) -> dg.ExecuteInProcessResult:
    """A damaged file resyncs Account (only), then a second one, within the hour, leaves a resync deferred."""
    land_cut_gzip(platform, org, "cut.jsonl.gz")
    platform.run(close_after=0)
    resync_of_account_at_once(platform)
    land_cut_gzip(platform, org, "again.jsonl.gz")
    return platform.run(close_after=0, checks=True)


def test_a_damaged_file_resyncs_the_objects_it_names_and_again_only_after_damaged_resync_every(platform, org):
    result = deferred_damage(platform, org)
    account = platform.materialization(result, "Account")
    assert account["resync_pending"].endswith("from 1 damaged landing file")
    until = datetime.fromisoformat(account["resync_deferred_until"])
    assert 3500 < until.timestamp() - time.time() <= 3600

    check = platform.check_results(result, "Account")[NO_PENDING_RESYNC]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert f"deferred until {until.isoformat()}" in check.description and "again.jsonl.gz" in check.description
    assert check.metadata["damaged_files"].value == ["again.jsonl.gz"]
    assert platform.check_results(result, "Contact")[NO_PENDING_RESYNC].passed

    held = reconcile_tick(platform)
    assert not held.run_requests and "resync of Account deferred until" in held.skip_reason.skip_message
    # Meanwhile Account's dirty records are reconciled as usual.
    account_id = org.store.snapshot("Account")[0]["Id"]
    platform.land([event("Account", "GAP_UPDATE", [account_id], int(time.time() * 1000))])
    platform.run(close_after=0)
    [reconcile] = reconcile_tick(platform).run_requests
    assert reconcile.tags[work_tag("Account")] == "reconcile" and platform.execute(reconcile).success
    assert platform.materialization_of("Account")["resync_deferred_until"] == until.isoformat()
    # Once its time has come the sensor asks for it, with no new materialization.
    warehouse, replication = platform.defs.resources["warehouse"], load_config(platform.config)
    [later] = plan(platform.instance, warehouse, replication, now=until.timestamp() + 1)
    assert (later.work.name, later.work.kind, later.ready) == ("Account", "resync", True)

    platform.set_options(damaged_resync_every=1)
    time.sleep(1)
    platform.run(close_after=0)
    resync_of_account_at_once(platform)
    assert not platform.materialization_of("Account")["resync_pending"]


def test_an_overflow_from_the_org_does_not_wait_behind_a_deferred_damaged_file_resync(platform, org):
    deferred_damage(platform, org)
    assert not reconcile_tick(platform).run_requests
    platform.land([event("Account", "GAP_OVERFLOW", [OVERFLOW_ID], int(time.time() * 1000))])
    platform.run(close_after=0)
    assert platform.materialization_of("Account")["resync_deferred_until"] == ""
    resync_of_account_at_once(platform)
