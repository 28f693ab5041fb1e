"""History tables end to end, under the sensors: the real HTTPS emulator (keeping every record's state after every
transaction), Dagster's real sensor evaluation and materialize(), real Spark and Delta.

A workload with creates, updates, deletes, undeletes and purges, then gap events (reconciled), then an overflow
(resynced). Every history's current rows equal its replica (the check, and independently), and every version equals
a state the org went through: a cdc version the state after its transaction, a reconcile or snapshot version the
state at its SystemModstamp. While no gap hid them, every transaction of a record has its version.
"""

from __future__ import annotations

import pytest
from harness import Platform
from org_compare import differences
from org_compare import history_differences as org_history_differences
from settings import TEST_SPARK_CONF

from cdc_assets.history.checks import HISTORY_MATCHES_REPLICA, history_differences
from object_schema.describe import ObjectSchema
from replication.history.stage import history_name
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload
from sensors.landing_zone import SENSOR_NAME as LANDING_SENSOR

OBJECTS = ["Account", "Contact"]
pytestmark = pytest.mark.slow


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


def land_and_apply(platform: Platform, org: Emulator) -> None:
    """Publish what the org committed, then do what the landing sensor asks, as the daemon would."""
    org.flush_cdc()
    assert platform.run_sensor(LANDING_SENSOR), "new files should make the landing sensor request a run"


def assert_history_is_the_orgs(platform: Platform, org: Emulator) -> dict[str, list[dict]]:
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    out = {}
    for name in OBJECTS:
        assert differences(org, name, platform.rows(name)) == [], name
        columns = ObjectSchema.from_describe(org.store.describe(name)).column_names
        assert history_differences(warehouse, name, columns) == [], name
        versions = platform.table(history_name(name))
        assert org_history_differences(org, name, versions, limit=0) == [], name
        out[name] = versions
    return out


def test_history_under_the_sensors_holds_every_transaction_the_org_went_through(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", keep_states=True) as org:
        workload = Workload(org, seed=21, large_transaction=(60, 80), person_accounts=False)
        workload.build_org(accounts=15)
        platform = Platform(
            tmp_path / "p",
            None,
            OBJECTS,
            TEST_SPARK_CONF,
            salesforce=resource(org),
            initial_load=True,
            history=True,
            close_after=0,
        )
        assert platform.run_sensor()  # no table yet: the initial loads, at once
        loaded = {n: {v["Id"] for v in platform.table(history_name(n))} for n in OBJECTS}
        assert all(loaded.values()) and all(
            v["_sf_source"] == "snapshot" for n in OBJECTS for v in platform.table(history_name(n))
        )

        # 1. Clean changes: one cdc version per transaction, every one of them.
        first = {n: {s["transaction_key"] for s in org.store.record_states(n)} for n in OBJECTS}
        workload.run(changes=120)
        land_and_apply(platform, org)
        assert platform.run_sensor() == []  # nothing dirty, nothing to resync
        versions = assert_history_is_the_orgs(platform, org)
        for name in OBJECTS:
            made = {(v["Id"], v["_transaction_key"]) for v in versions[name] if v["_sf_source"] == "cdc"}
            org_changes = {
                (s["Id"], s["transaction_key"])
                for s in org.store.record_states(name)
                if s["transaction_key"] not in first[name] and s["state"] is not None
            }
            assert org_changes and org_changes <= made, (name, sorted(org_changes - made)[:5])
        kinds = {v["_change_type"] for n in OBJECTS for v in versions[n]}
        assert {"CREATE", "UPDATE", "DELETE", "UNDELETE"} <= kinds, kinds

        # 2. Gap events: their records' versions stop until the reconcile, which makes one (marked reconcile).
        org.set_faults(FaultConfig(gap_fraction=0.25, seed=3))
        workload.run(changes=120)
        land_and_apply(platform, org)
        org.set_faults(FaultConfig())
        requests = platform.run_sensor()
        assert any("reconcile" in r.tags["cdc/mode"] for r in requests)
        versions = assert_history_is_the_orgs(platform, org)
        assert any(v["_sf_source"] == "reconcile" for n in OBJECTS for v in versions[n])

        # 3. An overflow: the resync's snapshot versions where it found records changed, marked snapshot.
        org.set_faults(FaultConfig(overflow_threshold=50, seed=4))
        workload.run(changes=40)
        workload.large("Contact")
        land_and_apply(platform, org)
        org.set_faults(FaultConfig())
        before = len(platform.table(history_name("Contact")))
        requests = platform.run_sensor()
        assert any("resync" in r.tags["cdc/mode"] for r in requests)
        workload.run(changes=60)
        land_and_apply(platform, org)
        versions = assert_history_is_the_orgs(platform, org)
        resynced = [v for v in versions["Contact"] if v["_sf_source"] == "snapshot" and v["_version"] > 1]
        assert resynced and len(versions["Contact"]) > before

        # The check on each replica, in a run of its own.
        result = platform.run(checks=True, raise_on_error=False)
        checks = {(e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()}
        assert all(checks[(n, HISTORY_MATCHES_REPLICA)] for n in OBJECTS), checks
