"""The Pub/Sub API's rules as a real org enforces them, over real gRPC with TLS: the three auth headers on every
call, the documented replay id error code, one topic per stream, at most 100 events per FetchRequest."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cdc_subscriber.proto import int_to_replay, pb, services
from salesforce_emulator import Emulator
from salesforce_emulator.pubsub_server import AUTH_ERROR, REPLAY_CORRUPTED


@pytest.fixture
def org(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(tmp_path / "org", pubsub=True, keepalive_seconds=0.3) as emu:
        yield emu


@pytest.fixture
def stub(org: Emulator) -> Iterator[services.PubSubStub]:
    channel = grpc.secure_channel(org.pubsub_address, grpc.ssl_channel_credentials(Path(org.ca_file).read_bytes()))
    yield services.PubSubStub(channel)
    channel.close()


def good(org: Emulator) -> dict[str, str]:
    return {"accesstoken": org.token, "instanceurl": org.instance_url, "tenantid": org.tenant_id}


def create_accounts(org: Emulator, count: int) -> None:
    for n in range(count):
        with org.store.transaction() as txn:
            txn.create("Account", {"Name": f"A{n}"})


def subscribe(stub, metadata: dict[str, str], *requests) -> Iterator:
    return stub.Subscribe(iter(requests), metadata=tuple(metadata.items()))


@pytest.mark.parametrize("header", ["accesstoken", "instanceurl", "tenantid"])
@pytest.mark.parametrize("broken", ["wrong", "missing"])
def test_each_auth_header_is_checked_on_every_call(org, stub, header: str, broken: str):
    metadata = good(org)
    if broken == "missing":
        del metadata[header]
    else:
        metadata[header] = {
            "accesstoken": "stale-token",
            "instanceurl": "https://other.my.salesforce.com",
            "tenantid": "00D000000000002AAA",
        }[header]
    calls = [
        lambda: stub.GetTopic(pb.TopicRequest(topic_name="/data/ChangeEvents"), metadata=tuple(metadata.items())),
        lambda: next(subscribe(stub, metadata, pb.FetchRequest(topic_name="/data/ChangeEvents", num_requested=1))),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as error:
            call()
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert header in error.value.details()
        assert dict(error.value.trailing_metadata())["error-code"] == AUTH_ERROR


def test_good_headers_pass_with_a_15_character_org_id_and_a_trailing_slash(org, stub):
    metadata = good(org) | {"tenantid": org.tenant_id[:15], "instanceurl": org.instance_url + "/"}
    topic = stub.GetTopic(pb.TopicRequest(topic_name="/data/ChangeEvents"), metadata=tuple(metadata.items()))
    assert topic.can_subscribe and topic.tenant_guid == org.tenant_id


def test_expired_and_never_issued_replay_ids_answer_the_documented_error_code(org, stub):
    create_accounts(org, 4)
    org.expire_events_through(org.events.tip - 2)
    for bad in (int_to_replay(org.events.tip - 3), int_to_replay(org.events.tip + 5), b"\x01"):
        request = pb.FetchRequest(
            topic_name="/data/ChangeEvents",
            replay_preset=pb.ReplayPreset.Value("CUSTOM"),
            replay_id=bad,
            num_requested=10,
        )
        with pytest.raises(grpc.RpcError) as error:
            next(subscribe(stub, good(org), request))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(error.value.trailing_metadata())["error-code"] == REPLAY_CORRUPTED


def test_a_fetch_request_naming_another_topic_ends_the_stream(org, stub):
    create_accounts(org, 1)
    requests: queue.Queue = queue.Queue()
    requests.put(
        pb.FetchRequest(
            topic_name="/data/AccountChangeEvent", num_requested=1, replay_preset=pb.ReplayPreset.Value("EARLIEST")
        )
    )
    call = stub.Subscribe(iter(requests.get, None), metadata=tuple(good(org).items()))
    assert len(next(call).events) == 1
    requests.put(pb.FetchRequest(num_requested=1))  # the topic may be omitted
    requests.put(pb.FetchRequest(topic_name="/data/ContactChangeEvent", num_requested=1))
    with pytest.raises(grpc.RpcError) as error:
        for _ in call:
            pass
    requests.put(None)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "/data/ContactChangeEvent" in error.value.details()


def test_num_requested_counts_for_at_most_100_events(org, stub):
    create_accounts(org, 150)
    requests: queue.Queue = queue.Queue()
    requests.put(
        pb.FetchRequest(
            topic_name="/data/ChangeEvents", num_requested=1000, replay_preset=pb.ReplayPreset.Value("EARLIEST")
        )
    )
    call = stub.Subscribe(iter(requests.get, None), metadata=tuple(good(org).items()))
    received = 0
    for response in call:
        received += len(response.events)
        if not response.events:  # a keepalive: the demand is spent
            break
    call.cancel()
    requests.put(None)
    assert received == 100
