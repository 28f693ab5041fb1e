"""The subscriber against the emulator's Pub/Sub API: the same events the emulator's own writer lands, flow
control, replay presets, retention, token expiry."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path

import grpc
import pytest
from subscriber_harness import as_cometd, resource

from cdc_subscriber.proto import int_to_replay, pb, replay_to_int, services
from salesforce_emulator import FaultConfig
from salesforce_emulator.workload import Workload
from shared.subscriber_state import read_statuses


def mixed_workload(org, changes: int = 300) -> None:
    """Compound fields, nulls, multi-record events, gaps and an overflow; person accounts, time fields and long
    text diffs (Salesforce's, on by default)."""
    workload = Workload(org, seed=11, large_transaction=(40, 60), long_text=True)
    workload.build_org(accounts=15)
    org.set_faults(FaultConfig(gap_fraction=0.1, overflow_threshold=30, seed=2))
    workload.run(changes=changes)
    with org.store.transaction() as txn:  # one transaction over the overflow threshold
        for i, record_id in enumerate(org.store.ids("Account") + org.store.ids("Contact")):
            txn.update("Account" if record_id.startswith("001") else "Contact", record_id, {"Phone": f"555-{i:04d}"})


def test_subscriber_lands_exactly_the_events_the_emulator_writes(org, start_subscriber, landed, tmp_path):
    mixed_workload(org)
    sub = start_subscriber(org)
    sub.wait_for(org.events.tip)
    assert sub.stop() == "PAUSED"
    org.flush_cdc()
    reference, ours = landed(tmp_path / "reference"), landed(tmp_path / "sub" / "landing")
    assert len(ours) == len(reference) > 300
    # Every line equal as JSON (header, body, nested compounds, nulls, replay ids), less the Pub/Sub API's
    # nulledFields and diffFields, which the subscriber keeps and CometD does not send.
    assert as_cometd(ours) == reference
    kinds = {e["data"]["payload"]["ChangeEventHeader"]["changeType"] for e in ours}
    assert {"CREATE", "UPDATE", "DELETE", "UNDELETE", "GAP_OVERFLOW", "GAP_UPDATE"} <= kinds
    payloads = [e["data"]["payload"] for e in ours]
    updates = [p for p in payloads if p["ChangeEventHeader"]["changeType"] == "UPDATE"]
    assert any(None in p.values() for p in updates), "an UPDATE with an explicit null"
    assert any(isinstance(p.get("BillingAddress"), dict) for p in updates), "a compound component update"
    assert any(len(p["ChangeEventHeader"]["recordIds"]) > 1 for p in updates), "one event for several records"
    assert any(p["ChangeEventHeader"]["diffFields"] for p in updates), "a long text diff"
    accounts = [p for p in payloads if p["ChangeEventHeader"]["entityName"] == "Account"]
    assert any(isinstance(p.get("Name"), dict) for p in accounts), "a person account's name record"
    assert any(isinstance(p.get("Name"), str) for p in accounts), "a business account's name"
    assert any(p.get("Best_Time_To_Call__c") for p in payloads), "a time field"
    assert not list((tmp_path / "sub" / "landing").rglob("_*.jsonl")), "every file renamed into the zone"
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert status.state == "PAUSED" and status.events_landed == len(ours) and status.last_replay_id == org.events.tip


@pytest.mark.slow
def test_landed_files_parse_to_the_same_change_rows(org, start_subscriber, landed, tmp_path, spark):
    from object_schema.describe import ObjectSchema
    from spark_ops.parse import parse_lines

    mixed_workload(org, changes=120)
    sub = start_subscriber(org)
    sub.wait_for(org.events.tip)
    sub.stop()
    org.flush_cdc()
    schemas = {n: ObjectSchema.from_describe(org.store.describe(n)) for n in ("Account", "Contact", "Lead")}

    def rows(root):
        lines = [(str(i), 1, json.dumps(e)) for i, e in enumerate(landed(root))]
        parsed = parse_lines(spark.createDataFrame(lines, "source_file string, source_line long, raw string"), schemas)
        kept = parsed.drop("source_file", "source_line", "raw", "_is_object", "_payload", "_body")
        return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in kept.collect())

    reference, ours = rows(tmp_path / "reference"), rows(tmp_path / "sub" / "landing")
    assert ours == reference and len(ours) > 120
    assert all('"quarantine_reason": null' in row for row in ours)


def _stub(org):
    channel = grpc.secure_channel(org.pubsub_address, grpc.ssl_channel_credentials(Path(org.ca_file).read_bytes()))
    metadata = (("accesstoken", org.token), ("instanceurl", org.instance_url), ("tenantid", org.tenant_id))
    return channel, services.PubSubStub(channel), metadata


def test_server_sends_no_more_than_requested_then_keepalives(org):
    with org.store.transaction() as txn:
        for i in range(5):
            txn.create("Account", {"Name": f"A{i}"})
    channel, stub, metadata = _stub(org)
    requests: queue.Queue = queue.Queue()
    requests.put(
        pb.FetchRequest(
            topic_name="/data/AccountChangeEvent", replay_preset=pb.ReplayPreset.Value("EARLIEST"), num_requested=3
        )
    )
    call = stub.Subscribe(iter(requests.get, None), metadata=metadata)
    received = []
    for response in call:
        received += response.events
        if not response.events:  # a keepalive: nothing more may come until more is requested
            assert len(received) == 3 and response.pending_num_requested == 0
            assert replay_to_int(response.latest_replay_id) == replay_to_int(received[-1].replay_id)
            break
    requests.put(pb.FetchRequest(num_requested=10))
    for response in call:
        received += response.events
        if not response.events:
            break
    call.cancel()
    requests.put(None)
    assert len(received) == 5
    schema = stub.GetSchema(pb.SchemaRequest(schema_id=received[0].event.schema_id), metadata=metadata)
    assert json.loads(schema.schema_json)["name"] == "AccountChangeEvent"
    channel.close()


def test_replay_ids_outside_retention_or_corrupted_are_refused(org):
    for i in range(4):
        with org.store.transaction() as txn:
            txn.create("Account", {"Name": f"A{i}"})
    tip = org.events.tip
    org.expire_events_through(tip - 2)
    channel, stub, metadata = _stub(org)

    def first_response(replay_id: bytes, token_metadata=metadata):
        request = pb.FetchRequest(
            topic_name="/data/ChangeEvents",
            replay_preset=pb.ReplayPreset.Value("CUSTOM"),
            replay_id=replay_id,
            num_requested=10,
        )
        return next(stub.Subscribe(iter([request]), metadata=token_metadata))

    assert [replay_to_int(e.replay_id) for e in first_response(int_to_replay(tip - 2)).events] == [tip - 1, tip]
    for bad in (int_to_replay(tip - 3), int_to_replay(tip + 5), b"\x01"):
        with pytest.raises(grpc.RpcError) as error:
            first_response(bad)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "replayid" in dict(error.value.trailing_metadata())["error-code"]
    with pytest.raises(grpc.RpcError) as error:
        first_response(int_to_replay(tip), (("accesstoken", "wrong"),))
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()


def test_token_expiry_mid_stream_logs_in_again_and_loses_nothing(org, start_subscriber, landed, tmp_path):
    oauth = resource(org, access_token=None, client_id="emulator-client", client_secret="emulator-secret")
    workload = Workload(org, seed=4)
    workload.build_org(accounts=5)
    sub = start_subscriber(org, salesforce=oauth)
    sub.wait_for(org.events.tip)
    org.expire_session()  # the open stream ends UNAUTHENTICATED; the old token is refused from now on
    workload.run(changes=80)
    sub.wait_for(org.events.tip)
    assert sub.stop() == "PAUSED"
    org.flush_cdc()
    assert as_cometd(landed(tmp_path / "sub" / "landing")) == landed(tmp_path / "reference")
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert "session" in status.last_error and oauth.session()[0] == org.api.token


def test_an_expired_replay_id_lands_a_resync_of_every_object_then_follows_the_tip(
    org, start_subscriber, landed, tmp_path
):
    workload = Workload(org, seed=5)
    workload.build_org(accounts=5)
    first = start_subscriber(org)
    first.wait_for(org.events.tip)
    first.stop()
    workload.run(changes=30)  # events nobody lands before they age out
    org.expire_events_through(org.events.tip)
    second = start_subscriber(org)
    second.wait_for(org.events.tip)  # at the tip (the first keepalive moved the position there)
    with org.store.transaction() as txn:
        fresh = txn.create("Account", {"Name": "after the resync"})
    second.wait_for(org.events.tip)
    second.stop()
    events = landed(tmp_path / "sub" / "landing")
    markers = [
        e["data"]["payload"]["ChangeEventHeader"]
        for e in events
        if e["data"]["payload"]["ChangeEventHeader"]["changeType"] == "GAP_OVERFLOW"
    ]
    assert sorted(m["entityName"] for m in markers) == ["Account", "Case", "Contact", "Lead", "Opportunity"]
    assert len({m["transactionKey"] for m in markers}) == 1
    assert fresh in events[-1]["data"]["payload"]["ChangeEventHeader"]["recordIds"]
    [status] = read_statuses(tmp_path / "sub" / "state")
    assert status.resyncs == 1 and "no longer retained" in status.last_error


def test_a_silent_stream_is_cancelled_and_resumed_from_the_position(tmp_path, start_subscriber, landed):
    from salesforce_emulator import Emulator

    # The server's keepalive (270 s, as Salesforce) is far beyond the subscriber's patience (1 s): the watchdog
    # cancels the quiet stream, which reconnects after its durable position and misses nothing.
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "reference", pubsub=True, roll_seconds=3600) as org:
        workload = Workload(org, seed=8)
        workload.build_org(accounts=3)
        sub = start_subscriber(org, keepalive_timeout=1.0)
        sub.wait_for(org.events.tip)
        deadline = time.monotonic() + 30
        while "no keepalive" not in (read_statuses(tmp_path / "sub" / "state")[0].last_error or ""):
            assert time.monotonic() < deadline, "the watchdog never cancelled the silent stream"
            time.sleep(0.1)
        workload.run(changes=30)
        sub.wait_for(org.events.tip)
        sub.stop()
        org.flush_cdc()
        assert as_cometd(landed(tmp_path / "sub" / "landing")) == landed(tmp_path / "reference")


def test_a_per_object_channel_lands_that_objects_events_and_follows_the_tip(org, start_subscriber, landed, tmp_path):
    workload = Workload(org, seed=9)
    workload.build_org(accounts=5)
    workload.run(changes=60)
    sub = start_subscriber(org, topic="/data/AccountChangeEvent")
    sub.wait_for(org.events.tip)  # the last events are not Account's: keepalives carry the position to the tip
    sub.stop()
    org.flush_cdc()
    accounts = [
        e
        for e in landed(tmp_path / "reference")
        if e["data"]["payload"]["ChangeEventHeader"]["entityName"] == "Account"
    ]
    ours = as_cometd(landed(tmp_path / "sub" / "landing"))
    assert ours == [e | {"channel": "/data/AccountChangeEvent"} for e in accounts] and len(ours) > 5


def test_a_corrupted_saved_position_lands_a_resync_instead_of_starting_at_the_tip(
    org, start_subscriber, landed, tmp_path
):
    from cdc_subscriber.position import PositionStore

    with org.store.transaction() as txn:
        txn.create("Account", {"Name": "before"})
    PositionStore(tmp_path / "sub" / "state", "/data/ChangeEvents").save(int_to_replay(org.events.tip + 1000))
    sub = start_subscriber(org)
    deadline = time.monotonic() + 30
    while not read_statuses(tmp_path / "sub" / "state") or read_statuses(tmp_path / "sub" / "state")[0].resyncs < 1:
        assert time.monotonic() < deadline, "no resync for a replay id the org never issued"
        time.sleep(0.05)
    sub.stop()
    kinds = {e["data"]["payload"]["ChangeEventHeader"]["changeType"] for e in landed(tmp_path / "sub" / "landing")}
    assert kinds == {"GAP_OVERFLOW"}
    assert "corrupted" in read_statuses(tmp_path / "sub" / "state")[0].last_error


def test_a_folder_planted_as_a_link_in_the_zone_is_refused_and_the_position_stays(
    org, start_subscriber, landed, tmp_path
):
    """Another writer of the zone makes the year folder a link to a folder of its own: followed, the events would
    land where the platform never reads them while the position moved past them."""
    Workload(org, seed=14).build_org(accounts=3)
    zone, outside = tmp_path / "sub" / "landing", tmp_path / "outside"
    zone.mkdir(parents=True)
    outside.mkdir()
    years = {time.strftime("%Y", time.gmtime(time.time() + s)) for s in (0, 3600)}  # the events' commit years
    for year in years:
        (zone / year).symlink_to(outside, target_is_directory=True)
    sub = start_subscriber(org)
    deadline = time.monotonic() + 30
    while not (failed := [s for s in read_statuses(tmp_path / "sub" / "state") if s.state == "FAILED"]):
        assert time.monotonic() < deadline, "the stream never reported FAILED while the zone held a link"
        time.sleep(0.05)
    assert "is a symbolic link or not a folder" in (failed[0].last_error or "")
    time.sleep(0.5)  # a few retries, each refused the same way
    assert not list(outside.iterdir()) and sub.subscriber._saved is None
    assert read_statuses(tmp_path / "sub" / "state")[0].events_landed == 0

    for year in years:
        (zone / year).unlink()  # the operator removes the link: the stream lands from where it stood
    sub.wait_for(org.events.tip)
    assert sub.stop() == "PAUSED"
    org.flush_cdc()
    assert as_cometd(landed(zone)) == landed(tmp_path / "reference") and not list(outside.iterdir())


def test_the_org_going_away_fails_the_stream_then_it_reconnects_and_catches_up(tmp_path, start_subscriber, landed):
    from demo.processes import free_port
    from salesforce_emulator import Emulator

    rest_port, pubsub_port = free_port(), free_port()

    def serve() -> Emulator:  # the same org on the same ports each time
        return Emulator(
            tmp_path / "org",
            landing_dir=tmp_path / "reference",
            port=rest_port,
            pubsub=True,
            pubsub_port=pubsub_port,
            keepalive_seconds=0.3,
            roll_seconds=3600,
        ).start()

    org = serve()
    Workload(org, seed=12).build_org(accounts=3)
    sub = start_subscriber(org, backoff_max=0.3)
    sub.wait_for(org.events.tip)
    org.stop()  # the server goes away mid-stream: the subscriber retries with backoff
    deadline = time.monotonic() + 30
    while read_statuses(tmp_path / "sub" / "state")[0].state != "FAILED":
        assert time.monotonic() < deadline, "the stream never reported FAILED while the org was down"
        time.sleep(0.05)
    org = serve()
    Workload(org, seed=13).run(changes=40)
    sub.wait_for(org.events.tip)
    assert sub.stop() == "PAUSED"
    org.flush_cdc()
    org.stop()
    assert as_cometd(landed(tmp_path / "sub" / "landing")) == landed(tmp_path / "reference")


def test_topics_that_differ_only_in_underscores_keep_apart_position_status_dead_letters_and_spool(
    tmp_path, monkeypatch
):
    """``/data/ns__Obj__ChangeEvent`` and ``/data/ns_Obj__ChangeEvent`` once shared one slug, so every file. With
    an object-store zone each gets a spool of its own process too: private, in no folder anyone could predict."""
    import os
    import tempfile

    from cdc_subscriber.dead_letters import salvage
    from cdc_subscriber.service import Subscriber, SubscriberConfig
    from resources.salesforce import SalesforceResource
    from shared.subscriber_state import DeadLetter

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    topics = ["/data/ns__Obj__ChangeEvent", "/data/ns_Obj__ChangeEvent"]
    first, second = (
        Subscriber(
            SubscriberConfig(landing_dir=(tmp_path / "zone").as_uri(), state_dir=tmp_path / "state", topic=topic),
            SalesforceResource(instance_url="https://127.0.0.1:9", access_token="unused"),
        )
        for topic in topics
    )
    first.positions.save(b"\x00\x01")
    first.reporter.set_state("RUNNING")
    found = salvage(replay_id=b"\x07", schema_id="s", payload=b"", schema_text=None, channel=topics[0], entities=())
    first.dead_letters.record(DeadLetter.of(topics[0], b"\x07", "s", b"", "test", found))
    assert second.positions.load() is None and second.dead_letters.read() == [] and second.dead_letters.count == 0
    assert len({s.positions.path for s in (first, second)}) == len({s.reporter.path for s in (first, second)}) == 2
    assert first.writer.root != second.writer.root
    from cdc_subscriber.landing import SPOOL_PREFIX, remove_dead_spools

    for spool in (first.writer.root, second.writer.root):
        assert spool.parent == tmp_path / "tmp" and spool.name.startswith(f"{SPOOL_PREFIX}{os.getpid()}-")
        assert spool.stat().st_mode & 0o777 == 0o700
    dead = tmp_path / "tmp" / f"{SPOOL_PREFIX}999999999-data.X-abc"  # above any pid: a subscriber that died
    dead.mkdir()
    assert remove_dead_spools() == 1 and not dead.exists() and first.writer.root.exists()
    with pytest.raises(ValueError, match="not a Pub/Sub API topic name"):  # no file name is made of it
        SubscriberConfig(landing_dir=tmp_path / "zone", state_dir=tmp_path / "state", topic="/data/../../etc")
