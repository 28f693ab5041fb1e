"""The whole platform on object storage: a local S3 server (moto, started by the `s3` fixture) holds the landing
zone, the subscriber's state, the warehouse and the changefeed; nothing of the data path touches the local disk.

The CDC subscriber (its CLI, in a process of its own) streams the org's Pub/Sub API into `s3://.../landing`; the
real `landing_zone_sensor` and `reconciliation_sensor` and the changefeeds' automation conditions are evaluated and the runs they ask
for executed with Dagster's `materialize()`, as the daemon would; the replicas must equal the org and each feed
must replay to its replica. Exactly-once on S3 as in the kill suite (tests/cdc_assets/test_crash.py): the first
subscriber is SIGKILLed after landing a file but before saving its position (the restart lands those events
again), and platform runs are SIGKILLed at fault points of ingest, apply and the changefeed export; a re-run then
gives the same tables, checkpoints and feed as a run that never died.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from crash_runner import run_mode
from harness import Platform, comparable
from org_compare import differences, live_rows
from settings import REPO, TEST_SPARK_CONF
from subscriber_harness import resource

from cdc_subscriber.position import PositionStore
from replication.apply import APPLY_APP
from replication.changefeed.config import ChangefeedConfig
from replication.changefeed.reader import ChangefeedReader, replay
from resources.delta import CHANGE_EVENTS
from resources.landing_zone import LandingZone
from resources.storage import Folder, filesystem
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.pubsub_faults import decode_replay
from salesforce_emulator.workload import Workload
from sensors.landing_zone import SENSOR_NAME as LANDING_SENSOR
from sensors.reconciliation import SENSOR_NAME as RECONCILIATION_SENSOR
from shared.subscriber_state import read_statuses, state_dir_for

OBJECTS = ["Account", "Contact"]
TOPIC = "/data/ChangeEvents"
KILL_POINTS = ["ingest.after_commit", "replica.before_commit", "changefeed.before_rename"]
pytestmark = pytest.mark.slow


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", pubsub=True, keepalive_seconds=0.3) as emu:  # no landing files of its own
        yield emu


def s3_platform(root: Path, org: Emulator, prefix: str) -> Platform:
    """A platform whose landing zone, warehouse and changefeed are under `prefix` (s3://bucket/...)."""
    return Platform(
        root,
        None,
        OBJECTS,
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        close_after=0,
        landing_uri=f"{prefix}/landing",
        warehouse_uri=f"{prefix}/warehouse",
        changefeed=feed_options(prefix),
    )


def feed_options(prefix: str) -> dict:
    """The changefeed section: on S3, with an initial scan (so a feed replays to its replica from the start)."""
    return {"uri": f"{prefix}/changefeed", "initial_scan": True}


def feed_uri(prefix: str, name: str) -> str:
    return ChangefeedConfig(uri=f"{prefix}/changefeed").object_uri(name)


def spawn_subscriber(org: Emulator, platform: Platform, spool: Path, **env: str) -> subprocess.Popen:
    """`python -m cdc_subscriber subscribe` landing in the platform's S3 landing zone (state beside it, on S3)."""
    env = (
        os.environ
        | {
            "SF_INSTANCE_URL": org.instance_url,
            "SF_ACCESS_TOKEN": org.token,
            "SF_CA_BUNDLE": org.ca_file,
            "PYTHONPATH": str(REPO),
        }
        | env
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc_subscriber",
            "--landing-dir",
            platform.landing_uri,
            "subscribe",
            "--endpoint",
            org.pubsub_address,
            "--config",
            str(platform.config),
            "--initial-replay",
            "EARLIEST",
            "--roll-seconds",
            "0.1",
            "--keepalive-timeout",
            "10",
            "--spool-dir",
            str(spool),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def state_uri(platform: Platform) -> str:
    return str(state_dir_for(platform.landing_uri))


def position(platform: Platform) -> int:
    saved = PositionStore(state_uri(platform), TOPIC).load()
    return decode_replay(saved) or 0 if saved is not None else 0


def drain(org: Emulator, platform: Platform, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until everything the org published is landed (the saved position is the tip), then stop it gracefully."""
    deadline = time.monotonic() + timeout
    while position(platform) < org.events.tip:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"position {position(platform)} < tip {org.events.tip}"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""


def settle(platform: Platform, rounds: int = 6) -> list[str]:
    """Evaluate the landing and reconciliation sensors and the feeds' automation conditions and execute what they
    ask with the replicas' checks (a feed follows a replica whose blocking checks passed), as the daemon would,
    until none asks for anything; returns the reasons of the runs."""
    reasons = []
    for _ in range(rounds):
        requests = [
            (name, r) for name in (LANDING_SENSOR, RECONCILIATION_SENSOR) for r in platform.sensor_requests(name)
        ]
        requests += [("changefeed automation", r) for r in platform.automation_requests()]
        if not requests:
            return reasons
        for name, request in requests:
            assert platform.execute(request, checks=True).success, f"the run {name} requested ({request.tags}) failed"
            reasons.append(request.tags.get("cdc/reason") or request.tags.get("cdc/mode") or name)
    raise AssertionError(f"the sensors still ask for runs after {rounds} rounds: {reasons}")


def landed_files(platform: Platform) -> list[str]:
    return sorted(
        p
        for p, _ in Folder(platform.landing_uri).walk()
        if p.endswith(".jsonl") and not any(part.startswith("_") for part in p.split("/"))
    )


def test_subscriber_sensors_replicas_and_changefeed_on_s3_equal_the_org(tmp_path, org, s3, spark):
    prefix = f"s3://{s3.new_bucket()}/cdc"
    platform = s3_platform(tmp_path / "p", org, prefix)
    workload = Workload(org, seed=31, long_text=True)
    workload.build_org(accounts=12)
    assert settle(platform)  # initial loads (Bulk API 2.0) into s3://, then the feeds' first exports

    # A subscriber killed after landing a file, before saving its position: the restart lands those events again.
    workload.run(changes=40)
    killed = spawn_subscriber(
        org, platform, tmp_path / "spool", CDC_FAULT_POINT="subscriber.after_rename", CDC_FAULT_ACTION="kill"
    )
    assert killed.wait(timeout=120) == -signal.SIGKILL
    first = landed_files(platform)
    assert len(first) == 1 and position(platform) == 0
    proc = spawn_subscriber(org, platform, tmp_path / "spool")
    org.set_faults(FaultConfig(gap_fraction=0.15, seed=5))  # gap events: their records are reconciled by id
    workload.run(changes=60)
    org.set_faults(FaultConfig())
    workload.run(changes=20)
    drain(org, platform, proc)
    assert len(landed_files(platform)) > len(first)
    [status] = read_statuses(state_uri(platform))  # the subscriber's status, read from S3 as the sensor reads it
    assert status.state == "PAUSED" and status.events_landed > 0

    reasons = settle(platform)
    assert any("landing" in r for r in reasons) and any("dirty" in r or "reconcile" in r for r in reasons), reasons
    for name in OBJECTS:
        assert differences(org, name, platform.rows(name)) == [], name
        table = platform.delta_table(name)
        assert table.table_uri.startswith("s3://")
        assert replay(r for _, r in ChangefeedReader(feed_uri(prefix, name)).read()) == live_rows(table), name
    zone = LandingZone(path=platform.landing_uri)
    lines = zone.read(zone.list_files()).lines.num_rows
    events = platform.change_events()
    identities = {(e["event_key"], e["record_id"]) for e in events}
    assert len(identities) == len(events) < lines  # the re-landed events were ingested once


def snapshot(platform: Platform, prefix: str) -> dict:
    """Tables (replicas, change_events identities, quarantine), replica checkpoints and the replayed feeds."""
    tables = {o: comparable(platform.rows(o)) for o in OBJECTS}
    applied = {o: platform.delta_table(o).transaction_version(APPLY_APP) for o in OBJECTS}
    events = sorted((e["event_key"], e["record_id"]) for e in platform.change_events())
    quarantine = sorted((q["source_file"], q["source_line"], q["reason"]) for q in platform.quarantine())
    feeds = {o: replay(r for _, r in ChangefeedReader(feed_uri(prefix, o)).read()) for o in OBJECTS}
    return {"tables": tables, "applied": applied, "events": events, "quarantine": quarantine, "feeds": feeds}


def copy_prefix(source: str, target: str) -> None:
    fs, src = filesystem(source)
    _, dst = filesystem(target)
    for info in fs.get_file_info(pafs.FileSelector(src, recursive=True)):
        if info.type == pafs.FileType.File:
            fs.copy_file(info.path, dst + info.path[len(src) :])


def kill_run(spark, root: Path, platform: Platform, point: str, org: Emulator, prefix: str) -> None:
    """One platform pass (every transaction closed) in a subprocess on S3, SIGKILLed at `point`."""
    gateway = spark.sparkContext._gateway.gateway_parameters
    env = {
        **os.environ,
        "CDC_FAULT_POINT": point,
        "CDC_FAULT_ACTION": "kill",
        "PYSPARK_GATEWAY_PORT": str(gateway.port),
        "PYSPARK_GATEWAY_SECRET": gateway.auth_token,
        "SF_INSTANCE_URL": org.instance_url,
        "SF_ACCESS_TOKEN": org.token,
        "SF_CA_BUNDLE": org.ca_file,
        "CRASH_RUNNER_LANDING": platform.landing_uri,
        "CRASH_RUNNER_WAREHOUSE": platform.warehouse_uri,
        "CRASH_RUNNER_OPTIONS": json.dumps({"close_after": 0, "changefeed": feed_options(prefix)}),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "crash_runner.py"), str(root), "-", ",".join(OBJECTS), "apply"],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=600,
    )
    spark.catalog.clearCache()
    assert proc.returncode == -signal.SIGKILL, f"{point} was not reached: {proc.stderr.decode()[-3000:]}"


def test_a_run_killed_at_a_fault_point_on_s3_then_rerun_equals_a_run_that_never_died(tmp_path, org, s3, spark):
    bucket = s3.new_bucket()
    start = f"s3://{bucket}/start"
    platform = s3_platform(tmp_path / "start", org, start)
    workload = Workload(org, seed=32)
    workload.build_org(accounts=10)
    assert settle(platform)  # initial loads and feeds
    workload.run(changes=60)
    proc = spawn_subscriber(org, platform, tmp_path / "spool")
    drain(org, platform, proc)  # landed on S3, not ingested yet: what every run below starts from
    assert platform.table_version(CHANGE_EVENTS) is None and landed_files(platform)

    copy_prefix(start, f"s3://{bucket}/clean")
    clean = s3_platform(tmp_path / "clean", org, f"s3://{bucket}/clean")
    assert run_mode(clean, "apply").success
    expected = snapshot(clean, f"s3://{bucket}/clean")
    assert expected["events"] and expected["feeds"]["Account"]

    for point in KILL_POINTS:
        prefix = f"s3://{bucket}/{point}"
        copy_prefix(start, prefix)
        crashed = s3_platform(tmp_path / point, org, prefix)
        kill_run(spark, tmp_path / point, crashed, point, org, prefix)
        assert run_mode(crashed, "apply").success
        assert snapshot(crashed, prefix) == expected, point
