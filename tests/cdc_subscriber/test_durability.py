"""The subscriber as its own process, killed with SIGKILL at random points, an expired replay id, and poison events
in a busy stream: the replicas built from what it landed equal the org (Dagster's real materialize(), real Spark
and Delta). The org is what real orgs send: person accounts (Account.Name a union), a time field, long text diffs
(Salesforce's default)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from harness import Platform
from org_compare import differences
from settings import REPO, TEST_SPARK_CONF
from subscriber_harness import landed, resource

from cdc_subscriber.landing import LandingFileWriter
from cdc_subscriber.position import PositionStore, topic_slug
from cdc_subscriber.service import ALL_CHANGES, FAULT_POINTS
from cdc_subscriber.status import StatusReporter
from replication.config import UpkeepConfig
from replication.upkeep.landing import retire_landing
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.pubsub_faults import decode_replay
from salesforce_emulator.workload import Workload
from shared.faults import InjectedFault
from shared.subscriber_state import read_dead_letters, state_dir_for

OBJECTS = ["Account", "Contact", "Opportunity"]

pytestmark = pytest.mark.slow


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", pubsub=True, keepalive_seconds=0.3) as emu:  # no landing files of its own
        yield emu


def spawn(org: Emulator, platform: Platform, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
    env = (
        os.environ
        | {
            "SF_INSTANCE_URL": org.instance_url,
            "SF_ACCESS_TOKEN": org.token,
            "SF_CA_BUNDLE": org.ca_file,
            "PYTHONPATH": str(REPO),
        }
        | (extra_env or {})
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc_subscriber",
            "--landing-dir",
            str(platform.landing),
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
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def position(platform: Platform) -> int:
    """The emulator's event number of the saved position (its replay ids may be opaque bytes)."""
    path = PositionStore(state_dir_for(platform.landing), ALL_CHANGES).path
    return decode_replay(bytes.fromhex(json.loads(path.read_text())["replay_id"])) or 0 if path.exists() else 0


# Deadlines of the waits on the subscriber's process: room for a machine busy with other test processes (make test
# runs several); a passing run never waits them out.
DEADLINE = 180.0


def drain(org: Emulator, platform: Platform, proc: subprocess.Popen, timeout: float = DEADLINE) -> None:
    """Wait until this subscriber runs and everything the org published is landed, then stop it gracefully."""
    deadline = time.monotonic() + timeout
    status = StatusReporter(state_dir_for(platform.landing), ALL_CHANGES, topic_slug(ALL_CHANGES)).path
    while (
        position(platform) < org.events.tip
        or f'"pid": {proc.pid}' not in _read(status)
        or '"RUNNING"' not in _read(status)
    ):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"position {position(platform)} < tip {org.events.tip}"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def make_platform(tmp_path: Path, org: Emulator) -> Platform:
    return Platform(tmp_path / "p", None, OBJECTS, TEST_SPARK_CONF, salesforce=resource(org), initial_load=True)


def assert_equal_to_org(platform: Platform, org: Emulator) -> None:
    for name in OBJECTS:
        assert differences(org, name, platform.rows(name)) == [], name


def run_sensor_requests(platform: Platform) -> list[dg.RunRequest]:
    """What the reconciliation sensor asks for, executed as the daemon would."""
    return platform.run_sensor()


def test_sigkill_at_random_points_then_restart_loses_nothing(tmp_path, org, spark):
    workload = Workload(org, seed=21, long_text=True)
    workload.build_org(accounts=20)
    platform = make_platform(tmp_path, org)
    platform.run()  # initial load
    done = threading.Event()

    def changes() -> None:
        while not done.is_set():
            workload.run(changes=5)
            time.sleep(0.02)

    writer = threading.Thread(target=changes)
    writer.start()
    rng = random.Random(7)
    kills = 0
    try:
        for _ in range(8):
            proc = spawn(org, platform)
            time.sleep(rng.uniform(0.8, 2.5))  # startup is ~0.7 s: some kills land mid-stream, some mid-file
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    finally:
        done.set()
        writer.join()
    proc = spawn(org, platform)
    drain(org, platform, proc)
    published = org.events.read(0, org.events.tip, None, 1_000_000)
    ours = landed(platform.landing)
    identity = lambda e: json.dumps(e["data"], sort_keys=True)  # noqa: E731
    assert {identity(e) for e in ours} == {identity(json.loads(p.line)) for p in published}  # nothing skipped
    assert kills == 8 and len(published) > 300
    payloads = [json.loads(p.line)["data"]["payload"] for p in published]
    assert any(p["ChangeEventHeader"]["diffFields"] for p in payloads), "a long text diff over the Pub/Sub API"
    assert any(isinstance(p.get("Name"), dict) for p in payloads if p["ChangeEventHeader"]["entityName"] == "Account")
    assert any(p.get("Best_Time_To_Call__c") for p in payloads), "a time field"
    platform.run(close_after=0)
    assert platform.materialization_of("Account")["dirty_records"] > 0  # person accounts' Names to fetch at least
    run_sensor_requests(platform)
    assert_equal_to_org(platform, org)


def test_expired_replay_id_resyncs_every_object_and_the_replicas_equal_the_org(tmp_path, org, spark):
    workload = Workload(org, seed=22, long_text=True)
    workload.build_org(accounts=15)
    platform = make_platform(tmp_path, org)
    platform.run()
    proc = spawn(org, platform)
    workload.run(changes=60)
    drain(org, platform, proc)
    platform.run(close_after=0)
    workload.run(changes=80)  # the subscriber is down longer than the retention window: these events are gone
    org.expire_events_through(org.events.tip)
    proc = spawn(org, platform)
    time.sleep(1.5)
    workload.run(changes=40)
    drain(org, platform, proc)
    platform.run(close_after=0)
    assert {platform.materialization_of(n)["resync_pending"] is not None for n in OBJECTS} == {True}
    run_sensor_requests(platform)
    assert_equal_to_org(platform, org)


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_killed_at_each_fault_point_the_restart_relands_and_never_skips(tmp_path, org, point):
    workload = Workload(org, seed=23, long_text=True)
    workload.build_org(accounts=5)
    platform = make_platform(tmp_path, org)
    killed = spawn(org, platform, {"CDC_FAULT_POINT": point, "CDC_FAULT_ACTION": "kill"})
    assert killed.wait(timeout=DEADLINE) == -signal.SIGKILL
    first = sorted(p for p in platform.landing.rglob("*.jsonl") if not p.name.startswith("_"))
    before = position(platform)
    drain(org, platform, spawn(org, platform))
    published = {p.replay_id for p in org.events.read(0, org.events.tip, None, 1_000_000)}
    ours = [e["data"]["event"]["replayId"] for e in landed(platform.landing)]
    assert set(ours) == published  # nothing skipped
    assert not list(platform.landing.rglob("_*.jsonl")), "the killed subscriber's open file was cleaned up"
    if point == "subscriber.after_write":  # nothing was visible yet
        assert first == [] and before == 0 and len(ours) == len(published)
    elif point == "subscriber.after_rename":  # its first file landed but not its position: landed again
        assert len(first) == 1 and before == 0 and len(ours) > len(published)
    else:  # the position was saved: the restart continues after it
        assert len(first) == 1 and before > 0 and len(ours) == len(published)


def test_poison_events_in_a_busy_stream_still_end_with_every_replica_equal_to_the_org(tmp_path, org, spark):
    workload = Workload(org, seed=24)
    workload.build_org(accounts=20)
    platform = make_platform(tmp_path, org)
    platform.run()  # initial load
    # Phase 1: two events whose header reads: their records are reconciled by id.
    modes = poisoned_stream(org, platform, workload, {30: "body", 70: "body"})
    assert modes == {"reconcile"}
    assert_equal_to_org(platform, org)
    # Phase 2: an event that is garbage (its entity is resynced) and one whose schema the org cannot serve (every
    # object is resynced), then more of the busy stream; the org now issues opaque replay ids of 4 to 7 bytes (the
    # saved 8-byte position still resumes), so every landed replayId is null and ordering rests on commit position.
    org.set_faults(opaque_replay_ids=True)
    modes = poisoned_stream(org, platform, workload, {30: "payload", 70: "schema"})
    assert "resync" in modes
    assert any(e["data"]["event"]["replayId"] is None for e in landed(platform.landing))
    assert_equal_to_org(platform, org)
    assert len(read_dead_letters(state_dir_for(platform.landing))) == 4


def poisoned_stream(org: Emulator, platform: Platform, workload: Workload, poison_at: dict[int, str]) -> set[str]:
    """Spoil the events ``n`` ahead of the tip, run the subscriber through a busy stream carrying them, apply what
    landed and every run the reconciliation sensor asks for; returns the modes of those runs."""
    start = org.events.tip
    poison = {start + n: kind for n, kind in poison_at.items()}
    org.set_faults(poison_events=poison)  # keeps the other knobs
    proc = spawn(org, platform)
    while org.events.tip < start + max(poison_at) + 60:
        workload.run(changes=5)
        time.sleep(0.02)
    drain(org, platform, proc)
    letters = read_dead_letters(state_dir_for(platform.landing))
    assert set(poison) <= {decode_replay(bytes.fromhex(x.replay_id)) for x in letters}
    platform.run(close_after=0)
    modes: set[str] = set()
    for _ in range(4):  # the reconcile or resync runs, then whatever those leave
        requests = run_sensor_requests(platform)
        modes |= {r.tags.get("cdc/mode") for r in requests}
        if not requests:
            return modes
    raise AssertionError(f"the reconciliation sensor still asks for runs after 4 rounds ({modes})")


def test_a_file_landed_again_under_a_retired_files_name_is_ingested(tmp_path, spark, sample_dir, monkeypatch):
    """Killed after its first file's rename (`subscriber.after_rename`), before saving its position, the subscriber
    lands those events again from the same first event, so under the same name: free once upkeep retired the first
    file. The new file holds more events; the ledger takes it for the new file it is, and every event is ingested."""
    platform = Platform(tmp_path / "p", sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0)
    t0 = 1_763_800_000_000
    events = [
        (
            event("Account", "CREATE", [f"001{n:012d}AAA"], t0 + n, tx=f"t{n}", replay=n + 1, Name=f"A{n}"),
            t0 + n,
            f"t{n}",
            (n + 1).to_bytes(8, "big"),
        )
        for n in range(4)
    ]
    acknowledged: list = []

    def subscriber_lands(count: int) -> Path | str | None:
        writer = LandingFileWriter(platform.landing, lambda path, lines, replay: acknowledged.append(path))
        for line, ts, key, replay in events[:count]:
            writer.write(line, ts, key, replay)
        return writer.roll()

    monkeypatch.setenv("CDC_FAULT_POINT", "subscriber.after_rename")
    with pytest.raises(InjectedFault):
        subscriber_lands(2)
    monkeypatch.delenv("CDC_FAULT_POINT")
    [first] = list(platform.landing.rglob("*.jsonl"))
    assert acknowledged == []  # its position was never saved: the events come again
    platform.run()
    assert platform.materialization(platform.run(), "change_events")["files"] == 0  # still in the zone: not re-read
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    assert retire_landing(warehouse, landing, UpkeepConfig()).files_retired == 1

    assert subscriber_lands(4) == first  # restarted: the same events and more, under the first file's name
    platform.run()
    assert sorted(platform.rows("Account")) == [f"001{n:012d}AAA" for n in range(4)]
    assert len(platform.change_events()) == 4
