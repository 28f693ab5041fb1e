"""The subscriber against the emulator's Pub/Sub API when events do not decode (poison events), when replay ids are
opaque bytes of varying length, and with ``--per-object`` over a configuration that polls some objects."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from settings import REPO
from subscriber_harness import as_cometd

from cdc_subscriber.header import is_api_name, plausible_commit_ts
from cdc_subscriber.position import PositionStore
from cdc_subscriber.proto import int_to_replay
from salesforce_emulator.pubsub_faults import decode_replay, encode_replay
from salesforce_emulator.workload import Workload
from shared.markers import DUMMY_RECORD_ID
from shared.subscriber_state import read_dead_letters, read_statuses, state_dir_for

ENTITIES = ["Account", "Case", "Contact", "Lead", "Opportunity"]  # subscriber_config's replicated objects


def header(event: dict) -> dict:
    return event["data"]["payload"]["ChangeEventHeader"]


def pick(published, fraction: float, entity: str | None = None) -> int:
    """The replay id of a CREATE/UPDATE/DELETE about ``fraction`` of the way through the stream."""
    start = int(len(published) * fraction)
    for event in published[start:]:
        h = header(json.loads(event.line))
        if h["changeType"] in ("CREATE", "UPDATE", "DELETE") and entity in (None, h["entityName"]):
            return event.replay_id
    raise AssertionError("no suitable event to poison")


def test_poison_events_in_a_busy_stream_become_dead_letters_and_the_stream_goes_on(
    org, start_subscriber, landed, tmp_path
):
    workload = Workload(org, seed=31)
    workload.build_org(accounts=10)
    workload.run(changes=200)
    published = org.events.read(0, org.events.tip, None, 1_000_000)
    poison = {
        pick(published, 0.25): "body",
        pick(published, 0.5, "Contact"): "payload",
        pick(published, 0.75): "schema",
    }
    org.set_faults(poison_events=poison)
    sub = start_subscriber(org)
    sub.wait_for(org.events.tip)  # the position passes every poison event
    workload.run(changes=30)  # and later events still land
    sub.wait_for(org.events.tip)
    assert sub.stop() == "PAUSED"
    org.flush_cdc()

    reference, ours = landed(tmp_path / "reference"), as_cometd(landed(tmp_path / "sub" / "landing"))
    clean = lambda events: [e for e in events if e["data"]["event"]["replayId"] not in poison]  # noqa: E731
    assert clean(ours) == clean(reference) and len(clean(ours)) > 200
    by_kind = {
        kind: [header(e) for e in ours if e["data"]["event"]["replayId"] == replay] for replay, kind in poison.items()
    }
    originals = {
        kind: header(e)
        for e in reference
        for replay, kind in poison.items()
        if e["data"]["event"]["replayId"] == replay
    }
    [gap] = by_kind["body"]  # its header read: its records become dirty, under the original event's identity
    assert gap["changeType"] == "GAP_" + originals["body"]["changeType"]
    assert gap["recordIds"] == originals["body"]["recordIds"]
    assert gap["transactionKey"] == originals["body"]["transactionKey"]
    [overflow] = by_kind["payload"]  # nothing read but the schema: its entity is resynced
    assert (overflow["entityName"], overflow["changeType"], overflow["recordIds"]) == (
        "Contact",
        "GAP_OVERFLOW",
        [DUMMY_RECORD_ID],
    )
    assert sorted(h["entityName"] for h in by_kind["schema"]) == ENTITIES  # not even the entity: every one

    letters = read_dead_letters(tmp_path / "sub" / "state")
    assert {int(x.replay_id, 16): x.entity for x in letters} == {
        r: {"body": originals["body"]["entityName"], "payload": "Contact", "schema": None}[k] for r, k in poison.items()
    }
    assert all(x.reason and x.payload and x.schema_id for x in letters)
    assert "NOT_FOUND" in next(x.reason for x in letters if x.entity is None)
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert status.dead_letters == 3 and status.last_error is None, "the stream never failed"
    assert status.last_dead_letter.startswith("replay id ") and status.last_dead_letter_at

    # A restart from further back (a crash before the position moved) is handed the same events again: the same
    # lines land again (duplicates the platform counts) and the dead letters are not counted twice.
    PositionStore(tmp_path / "sub" / "state", "/data/ChangeEvents").path.unlink()
    again = start_subscriber(org)
    again.wait_for(org.events.tip)
    again.stop()
    assert len(read_dead_letters(tmp_path / "sub" / "state")) == 3
    assert read_statuses(tmp_path / "sub" / "state")[0].dead_letters == 3


def test_events_whose_header_cannot_be_landed_become_dead_letters_and_the_stream_goes_on(
    org, start_subscriber, landed, tmp_path
):
    workload = Workload(org, seed=33)
    workload.build_org(accounts=5)
    workload.run(changes=60)
    published = org.events.read(0, org.events.tip, None, 1_000_000)
    # Both decode: a commitTimestamp in nanoseconds (a year the landing folders cannot name), and an entityName of
    # 300 characters of "../" (not an API name: never asked of describe(), never landed).
    poison = {pick(published, 0.3): "timestamp", pick(published, 0.6, "Contact"): "entity"}
    org.set_faults(poison_events=poison)
    started = time.time() * 1000
    sub = start_subscriber(org)
    sub.wait_for(org.events.tip)  # the position passes both
    assert sub.stop() == "PAUSED"
    org.flush_cdc()

    reference, ours = landed(tmp_path / "reference"), as_cometd(landed(tmp_path / "sub" / "landing"))
    clean = lambda events: [e for e in events if e["data"]["event"]["replayId"] not in poison]  # noqa: E731
    assert clean(ours) == clean(reference) and len(clean(ours)) > 60
    assert all(plausible_commit_ts(header(e)["commitTimestamp"]) and is_api_name(header(e)["entityName"]) for e in ours)
    by_kind = {
        kind: [header(e) for e in ours if e["data"]["event"]["replayId"] == replay] for replay, kind in poison.items()
    }
    originals = {
        kind: header(e)
        for e in reference
        for replay, kind in poison.items()
        if e["data"]["event"]["replayId"] == replay
    }
    [gap] = by_kind["timestamp"]  # its records are reconciled by id, the event ordered at the time it came
    assert gap["changeType"] == "GAP_" + originals["timestamp"]["changeType"]
    assert (gap["recordIds"], gap["transactionKey"]) == (
        originals["timestamp"]["recordIds"],
        originals["timestamp"]["transactionKey"],
    )
    assert started <= gap["commitTimestamp"] <= time.time() * 1000
    [overflow] = by_kind["entity"]  # the entity its schema names is resynced
    assert (overflow["entityName"], overflow["changeType"]) == ("Contact", "GAP_OVERFLOW")

    letters = {decode_replay(bytes.fromhex(x.replay_id)): x for x in read_dead_letters(tmp_path / "sub" / "state")}
    assert set(letters) == set(poison)
    by_reason = {kind: letters[replay] for replay, kind in poison.items()}
    assert "commitTimestamp" in by_reason["timestamp"].reason and "entityName" in by_reason["entity"].reason
    assert by_reason["entity"].entity == "Contact" and len(by_reason["entity"].reason) < 400
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert status.dead_letters == 2 and status.last_error is None, "the stream never failed"


def test_opaque_replay_ids_are_saved_and_resumed_as_the_bytes_the_org_gave(org, start_subscriber, landed, tmp_path):
    org.set_faults(opaque_replay_ids=True)
    workload = Workload(org, seed=32)
    workload.build_org(accounts=5)
    workload.run(changes=40)
    first = start_subscriber(org)
    first.wait_for(encode_replay(org.events.tip, opaque=True))
    first.stop()
    saved = PositionStore(tmp_path / "sub" / "state", "/data/ChangeEvents")
    assert saved.load() == encode_replay(org.events.tip, opaque=True) and len(saved.load()) != 8
    assert json.loads(saved.path.read_text())["replay_int"] is None  # no integer form for these
    workload.run(changes=40)
    second = start_subscriber(org)  # resumes after the saved bytes: nothing again, nothing skipped
    second.wait_for(encode_replay(org.events.tip, opaque=True))
    second.stop()
    org.flush_cdc()
    ours, reference = as_cometd(landed(tmp_path / "sub" / "landing")), landed(tmp_path / "reference")
    without_replay = lambda e: json.dumps({**e["data"], "event": None}, sort_keys=True)  # noqa: E731
    assert sorted(map(without_replay, ours)) == sorted(map(without_replay, reference)) and len(ours) > 80
    assert {e["data"]["event"]["replayId"] for e in ours} == {None}  # CometD replayId: a long, or null
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert status.last_replay_id is None and status.last_replay_id_hex == saved.load().hex()


def test_per_object_subscribes_and_resyncs_only_the_cdc_objects(umask_022, org, tmp_path):
    config = tmp_path / "replication.yaml"
    config.write_text(yaml.safe_dump({"objects": ["Account", "Contact", {"name": "Lead", "mode": "poll"}]}))
    landing = tmp_path / "landing"
    state = state_dir_for(landing)
    # A position the org never issued: the Account stream lands a resync marker for every object it may name.
    PositionStore(state, "/data/AccountChangeEvent").save(int_to_replay(org.events.tip + 1000))
    with org.store.transaction() as txn:
        txn.create("Account", {"Name": "A"})
        txn.create("Lead", {"LastName": "L", "Company": "C"})
    env = os.environ | {
        "SF_INSTANCE_URL": org.instance_url,
        "SF_ACCESS_TOKEN": org.token,
        "SF_CA_BUNDLE": org.ca_file,
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc_subscriber",
            "--landing-dir",
            str(landing),
            "subscribe",
            "--per-object",
            "--endpoint",
            org.pubsub_address,
            "--config",
            str(config),
            "--initial-replay",
            "EARLIEST",
            "--roll-seconds",
            "0.1",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _settled(state):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, [(s.topic, s.state, s.resyncs) for s in read_statuses(state)]
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert sorted(s.topic for s in read_statuses(state)) == ["/data/AccountChangeEvent", "/data/ContactChangeEvent"]
    events = [
        json.loads(line)
        for path in landing.rglob("*.jsonl")
        if not path.name.startswith("_")
        for line in path.read_text().splitlines()
    ]
    markers = sorted(header(e)["entityName"] for e in events if header(e)["changeType"] == "GAP_OVERFLOW")
    assert markers == ["Account", "Contact"]  # Lead is polled: no marker
    assert {header(e)["entityName"] for e in events} == {"Account", "Contact"}
    # Its state is beside the landing zone, not in it (no landing writer can forge it), and under a umask of 022
    # nothing it wrote, nor what the emulator's own writer landed, is readable by others.
    assert state == tmp_path / "landing-subscriber" and not landing.joinpath("_subscriber").exists()
    assert {p.name for p in landing.rglob("*") if p.is_file() and not p.name.endswith(".jsonl")} == set()
    org.flush_cdc()
    assert shared_with_others(landing) == shared_with_others(state) == shared_with_others(tmp_path / "reference") == []
    assert (tmp_path / "reference").exists() and {p.name for p in state.iterdir()} >= {
        "position-data.AccountChangeEvent.json",
        "status-data.AccountChangeEvent.json",
        "status-data.ContactChangeEvent.json",
    }


def shared_with_others(root: Path) -> list[str]:
    """Files and folders under ``root`` (itself included) that users other than the owner may read or enter."""
    return [f"{p} {oct(p.stat().st_mode & 0o777)}" for p in [root, *root.rglob("*")] if p.stat().st_mode & 0o077]


def _settled(state: Path) -> bool:
    statuses = {s.topic: s for s in read_statuses(state)}
    account = statuses.get("/data/AccountChangeEvent")
    return (
        len(statuses) == 2
        and all(s.state == "RUNNING" for s in statuses.values())
        and account is not None
        and account.resyncs == 1
        and account.events_landed > 1
    )


def test_the_emulators_opaque_replay_ids_vary_in_length_do_not_sort_and_read_back():
    from salesforce_emulator.pubsub_faults import decode_replay

    ids = {n: encode_replay(n, opaque=True) for n in (1, 255, 256, 70_000, 2**32, 2**40)}
    assert {n: decode_replay(b) for n, b in ids.items()} == {n: n for n in ids}
    assert {len(b) for b in ids.values()} >= {4, 5, 6} and 8 not in {len(b) for b in ids.values()}
    assert sorted(ids, key=lambda n: ids[n]) != sorted(ids), "byte order is not event order"
    assert decode_replay(ids[256][:-1] + b"\x00") is None and decode_replay(b"\x01") is None
    assert decode_replay(encode_replay(42, opaque=False)) == 42
