"""The changefeed end to end: the real HTTPS emulator, Dagster's real materialize() and sensors, real Spark.

One workload with deletes, undeletes, purges, gap events reconciled, and an overflow resynced; the feed configured
in replication.yaml (NEW_AND_OLD_IMAGES, YDB JSON, initial scan) is exported by the changefeed assets in the
platform's runs and, after replica-only runs, by their automation condition (as default_automation_condition_sensor
evaluates it); three more feeds of the same replicas in other
modes and formats are exported by calling the exporter. Each replays into the replica's live rows.
"""

from __future__ import annotations

import json

import dagster as dg
import jsonschema
import pytest
from deltalake import DeltaTable
from harness import Platform
from org_compare import live_rows
from settings import TEST_SPARK_CONF

from cdc_assets.changefeed.export import export_changefeed
from cdc_assets.names import changefeed_key
from replication.changefeed import DEBEZIUM_SCHEMA
from replication.changefeed.config import ChangefeedConfig
from replication.changefeed.reader import ChangefeedReader, read_consistent, record_ts, replay
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload
from sensors.reconciliation import SENSOR_NAME as RECONCILIATION_SENSOR

OBJECTS = ["Account", "Contact"]
SCHEMA = json.loads(DEBEZIUM_SCHEMA.read_text())
pytestmark = pytest.mark.slow


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def feed_records(config: ChangefeedConfig, name: str) -> list[dict]:
    return [r for _, r in ChangefeedReader(config.object_uri(name)).read()]


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


def sensor_requests(platform: Platform) -> list[dg.RunRequest]:
    """What the reconciliation sensor requests now (not run)."""
    sensor = platform.defs.get_sensor_def(RECONCILIATION_SENSOR)
    context = dg.build_sensor_context(
        instance=platform.instance, resources=platform.defs.resources, definitions=platform.defs
    )
    return sensor(context).run_requests or []


def changefeed_sensor_run(platform: Platform) -> list[dg.AssetKey]:
    """Evaluate the automation conditions as the daemon does and run the feeds they request."""
    requests = platform.automation_requests()
    for request in requests:
        assert platform.execute(request).success
    return [k for r in requests for k in r.asset_selection]


def test_feed_replays_to_the_replica_through_deletes_undeletes_reconciles_and_a_resync(tmp_path, org):
    main = ChangefeedConfig(uri=str(tmp_path / "feed"), initial_scan=True, max_versions_per_file=3)
    others = [
        ChangefeedConfig(uri=str(tmp_path / f"feed-{m}-{f}"), mode=m, format=f, initial_scan=True)
        for m, f in (("UPDATES", "json"), ("NEW_AND_OLD_IMAGES", "debezium_json"), ("KEYS_ONLY", "json"))
    ]
    platform = Platform(
        tmp_path / "p",
        None,
        OBJECTS,
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        changefeed={"uri": main.uri, "initial_scan": True, "max_versions_per_file": 3},
    )
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    workload = Workload(org, seed=11, large_transaction=(60, 80))
    workload.build_org(accounts=15)
    first = platform.run()  # initial loads, then the feeds' first exports (initial scan)
    changefeed_sensor_run(platform)  # the automation sensor's first evaluation: from here it sees what updates
    assert {m.asset_key for m in first.get_asset_materialization_events()} >= {changefeed_key(n) for n in OBJECTS}
    for config in others:
        for name in OBJECTS:
            export_changefeed(warehouse, name, config)

    org.set_faults(FaultConfig(gap_fraction=0.2, seed=3))
    workload.run(changes=150)
    org.flush_cdc()
    platform.run(close_after=0)
    org.set_faults(FaultConfig())
    reconciles = [r for r in sensor_requests(platform) if "reconcile" in r.tags["cdc/mode"]]
    assert reconciles, "the gap events should have made records dirty"
    for request in reconciles:  # replica-only runs with their checks: the feeds follow once those passed
        assert platform.execute(request, checks=True).success
    assert changefeed_sensor_run(platform)
    assert changefeed_sensor_run(platform) == []  # every feed is newer than its replica now

    org.set_faults(FaultConfig(overflow_threshold=50, seed=4))
    workload.run(changes=60)
    workload.large("Contact")
    org.flush_cdc()
    platform.run(close_after=0)
    org.set_faults(FaultConfig())
    resyncs = [r for r in sensor_requests(platform) if "resync" in r.tags["cdc/mode"]]
    assert resyncs, "the large transaction should have overflowed"
    before = {n: DeltaTable(str(platform.warehouse / n)).version() for n in OBJECTS}
    for request in resyncs:
        assert platform.execute(request, checks=True).success
    changefeed_sensor_run(platform)
    workload.run(changes=80)
    org.flush_cdc()
    platform.run(close_after=0)
    for config in others:
        for name in OBJECTS:
            export_changefeed(warehouse, name, config)

    for name in OBJECTS:
        table = DeltaTable(str(platform.warehouse / name))
        live = live_rows(table)
        records = feed_records(main, name)
        assert replay(records) == live, name
        reader = ChangefeedReader(main.object_uri(name))
        assert reader.version() == table.version()
        consumed, position = [], None
        for stop in (7, 1, 40, 3, 10**6):  # a consumer restarting from its saved position, mid-file and at ends
            for n, (pos, record) in enumerate(reader.read(position)):
                if n == stop:
                    break
                consumed.append(record)
                position = pos
        assert consumed == records  # no gap, no duplicate
        ops = [("erase" if "erase" in r else "update") for r in records if "key" in r]
        assert "erase" in ops, f"{name}: the workload deletes records"
        for config in others:
            got = replay(feed_records(config, name))
            assert (set(got) if config.mode == "KEYS_ONLY" else got) == (
                set(live) if config.mode == "KEYS_ONLY" else live
            ), (name, config.mode)
        debezium = next(c for c in others if c.format == "debezium_json")
        validator = jsonschema.Draft202012Validator(SCHEMA)
        for record in feed_records(debezium, name):
            validator.validate(record)
        sources = [r["value"]["source"] for r in feed_records(debezium, name) if r["value"]]
        assert {s["origin"] for s in sources} >= {"cdc", "snapshot"}
        # Every change applied from an event names its Salesforce transaction (a placeholder row a gap made for an
        # unknown record has no position, so no transaction either).
        assert any(s["txId"] for s in sources)
        missing = [s for s in sources if s["origin"] == "cdc" and s["commit_number"] is not None and not s["txId"]]
        assert not missing, missing[:3]

    # The resync emitted only the difference it made: count it independently from the two table versions.
    contact = DeltaTable(str(platform.warehouse / "Contact"))
    overwrite = next(
        h["version"]
        for h in contact.history()
        if h["version"] > before["Contact"] and (h.get("operationParameters") or {}).get("mode") == "Overwrite"
    )
    old = live_rows(DeltaTable(str(platform.warehouse / "Contact"), version=overwrite - 1))
    new = live_rows(DeltaTable(str(platform.warehouse / "Contact"), version=overwrite))
    differs = {i for i in set(old) | set(new) if old.get(i) != new.get(i)}
    debezium = next(c for c in others if c.format == "debezium_json")
    emitted = [
        r
        for r in feed_records(debezium, "Contact")
        if r["value"] and r["value"]["source"]["delta_version"] == overwrite
    ]
    assert 0 < len(emitted) == len(differs) < len(new)
    assert {r["key"]["Id"] for r in emitted} == differs

    # One clock for both feeds: a consistent cut holds every transaction whole, in all objects or in none.
    cut, merged = read_consistent({n: main.object_uri(n) for n in OBJECTS})
    assert cut >= 0 and [record_ts(r) for _, r in merged] == sorted(record_ts(r) for _, r in merged)
    inside = {record_ts(r)[1] for _, r in merged if record_ts(r)[1]}
    everywhere = [(n, r) for n in OBJECTS for r in feed_records(main, n) if record_ts(r)]
    split = [(n, r["key"]) for n, r in everywhere if record_ts(r)[1] in inside and record_ts(r)[0] > cut]
    assert not split, split[:3]
    assert len({record_ts(r)[1] for n, r in everywhere if record_ts(r)[1]}) > 0
