"""One replication.yaml of hundreds of objects (the emulator's generated custom objects `Thing_001__c` ...), driven
by the real sensors and Dagster's `materialize()`: every object is loaded at once, a burst touching all of them is
applied, and a change in one object starts a run of that object alone (nothing in it grows with the object count).

The 200-object variant (past Lakeflow's 250-table pipeline cap is measured in bench/many_objects.py) runs under
`make test-scale`; `make test` runs the same test with a few objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import replica_key
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.custom_objects import custom_object_name
from salesforce_emulator.workload import Workload
from sensors.landing_zone import SENSOR_NAME as LANDING_SENSOR


def _replicas(request) -> set[str]:
    return {k.path[-1] for k in request.asset_selection if k == replica_key(k.path[-1])}


def _assert_equal_to_org(platform: Platform, emu: Emulator, names: list[str]) -> None:
    for name in names:
        assert differences(emu, name, platform.rows(name)) == [], name


@pytest.mark.parametrize(
    "count", [pytest.param(4, id="4-objects"), pytest.param(200, id="200-objects", marks=pytest.mark.scale)]
)
def test_one_replication_yaml_replicates_every_object(tmp_path: Path, count: int) -> None:
    names = [custom_object_name(n) for n in range(1, count + 1)]
    emu = Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", roll_seconds=3600, custom_objects=count)
    workload = Workload(emu, seed=9, custom_objects=count, custom_records=2)
    workload.build_org(accounts=3)
    with emu:
        salesforce = SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        )
        platform = Platform(
            tmp_path / "p", None, names, TEST_SPARK_CONF, salesforce=salesforce, initial_load=True, close_after=0
        )

        # Every object at once: one run of every replica, loaded through Bulk API 2.0.
        loads = platform.run_sensor()
        assert [_replicas(r) for r in loads] == [set(names)]
        _assert_equal_to_org(platform, emu, names)

        # A burst touching every object: the landing run applies it to all of them.
        assert workload.touch_each(names) == count
        emu.flush_cdc()
        landing = platform.run_sensor(LANDING_SENSOR)
        assert set().union(*map(_replicas, landing)) == set(names)
        _assert_equal_to_org(platform, emu, names)

        # A change in one object: a run of that object alone, and nothing more asked for the others.
        workload.touch_each(names[-1:])
        emu.flush_cdc()
        one = platform.run_sensor(LANDING_SENSOR)
        assert [_replicas(r) for r in one] == [{names[-1]}]
        later = platform.sensor_requests(LANDING_SENSOR) + platform.sensor_requests()
        assert all(_replicas(r) <= {names[-1]} for r in later), [_replicas(r) for r in later]
        _assert_equal_to_org(platform, emu, names[-1:])
