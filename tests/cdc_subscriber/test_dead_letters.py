"""Dead letters, piece by piece: what is salvaged from an event that does not decode (gap lines when its header
reads, overflow markers when it does not, every replicated entity when not even the schema can be fetched), and the
record operators and Dagster count (unique by replay id, acknowledged on request)."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from pathlib import Path

import pytest

import resources.storage
from cdc_subscriber.dead_letters import DeadLetterStore, entity_of, read_header, salvage
from cdc_subscriber.decode import EventDecoder
from cdc_subscriber.proto import int_to_replay, pb
from salesforce_emulator.pubsub_avro import encode_event, schema_json
from salesforce_emulator.pubsub_faults import spoil
from shared.commit_time import LATEST_COMMIT_RULE, latest_commit_ms
from shared.markers import DUMMY_RECORD_ID
from shared.subscriber_state import DeadLetter, acknowledge, unacknowledged

ENTITIES = ("Account", "Contact", "Opportunity")
RECORDS = ["001000000000001AAA", "001000000000002AAA"]


def account_update() -> dict:
    header = {
        "entityName": "Account",
        "recordIds": RECORDS,
        "changeType": "UPDATE",
        "changeOrigin": "",
        "transactionKey": "tx-42",
        "sequenceNumber": 3,
        "commitTimestamp": 1_700_000_000_123,
        "commitNumber": 77,
        "commitUser": "005000000000001AAA",
        "changedFields": ["Name"],
        "nulledFields": [],
        "diffFields": [],
    }
    return {
        "channel": "/data/ChangeEvents",
        "data": {"schema": "s", "payload": {"ChangeEventHeader": header, "Name": "Acme"}, "event": {"replayId": 5}},
    }


def poison(kind: str) -> tuple[str, bytes]:
    return spoil(kind, *encode_event(account_update()))


def salvaged(kind: str, channel: str = "/data/ChangeEvents", replay_id: bytes = int_to_replay(5)):
    schema_id, payload = poison(kind)
    text = None if kind == "schema" else schema_json("Account")
    return salvage(
        replay_id=replay_id,
        schema_id=schema_id,
        payload=payload,
        schema_text=text,
        channel=channel,
        entities=ENTITIES,
        now_ms=lambda: 1_800_000_000_000,
    )


def headers(found) -> list[dict]:
    return [line["data"]["payload"]["ChangeEventHeader"] for line in found.lines]


@pytest.mark.parametrize("kind", ["body", "payload"])
def test_the_spoiled_events_really_do_not_decode(kind):
    schema_id, payload = poison(kind)
    decoder = EventDecoder(lambda _: schema_json("Account"), lambda _: {})
    event = pb.ConsumerEvent(event=pb.ProducerEvent(schema_id=schema_id, payload=payload), replay_id=int_to_replay(5))
    with pytest.raises(Exception):  # noqa: B017 - whatever fastavro raises on these bytes is what the service sees
        decoder.decode(event, "/data/ChangeEvents")


def test_a_readable_header_with_an_unreadable_body_lands_one_gap_for_its_records():
    found = salvaged("body")
    [header] = headers(found)
    assert header["changeType"] == "GAP_UPDATE" and header["recordIds"] == RECORDS
    # the original identity and position: a re-landed gap is a counted duplicate, and it sorts where the event did
    assert (header["entityName"], header["transactionKey"], header["sequenceNumber"]) == ("Account", "tx-42", 3)
    assert (header["commitTimestamp"], header["commitNumber"]) == (1_700_000_000_123, 77)
    assert header["changedFields"] == [] and found.lines[0]["data"]["event"]["replayId"] == 5
    assert (found.commit_ts, found.transaction_key, found.entity) == (1_700_000_000_123, "tx-42", "Account")
    assert "reconciled" in found.action


def test_unreadable_bytes_resync_the_entity_the_schema_names():
    found = salvaged("payload")
    [header] = headers(found)
    assert header["changeType"] == "GAP_OVERFLOW" and header["recordIds"] == [DUMMY_RECORD_ID]
    assert header["entityName"] == "Account" and header["transactionKey"] == f"dead-letter-{int_to_replay(5).hex()}"
    assert header["commitTimestamp"] == 1_800_000_000_000 and "resynced" in found.action


def test_a_schema_that_cannot_be_fetched_resyncs_every_replicated_entity_of_the_topic():
    everything = salvaged("schema")
    assert [(h["entityName"], h["changeType"], h["sequenceNumber"]) for h in headers(everything)] == [
        ("Account", "GAP_OVERFLOW", 1),
        ("Contact", "GAP_OVERFLOW", 2),
        ("Opportunity", "GAP_OVERFLOW", 3),
    ]
    assert len({h["transactionKey"] for h in headers(everything)}) == 1 and everything.entity is None
    one = salvaged("schema", channel="/data/ContactChangeEvent")  # a per-object channel still names its entity
    assert [h["entityName"] for h in headers(one)] == ["Contact"]


def test_a_header_without_usable_record_ids_resyncs_its_entity():
    event = account_update()
    event["data"]["payload"]["ChangeEventHeader"]["recordIds"] = ["001000000*"]  # a key prefix wildcard
    schema_id, payload = spoil("body", *encode_event(event))
    found = salvage(
        replay_id=b"\x07",
        schema_id=schema_id,
        payload=payload,
        schema_text=schema_json("Account"),
        channel="/data/ChangeEvents",
        entities=ENTITIES,
    )
    [header] = headers(found)
    assert header["changeType"] == "GAP_OVERFLOW" and header["entityName"] == "Account"
    assert header["commitTimestamp"] == 1_700_000_000_123  # the header's time, as it was readable
    assert found.lines[0]["data"]["event"]["replayId"] is None  # a 1-byte replay id has no CometD long form


def test_read_header_says_why_it_cannot():
    assert read_header(None, b"") == (None, "no schema")
    header, why = read_header(schema_json("Account"), b"\xff" * 40)
    assert header is None and why
    not_a_change_event = json.dumps({"type": "record", "name": "X", "fields": [{"name": "a", "type": "int"}]})
    assert "not ChangeEventHeader" in read_header(not_a_change_event, b"\x02")[1]


def test_entity_of_schema_and_channel_names():
    assert entity_of("AccountChangeEvent") == "Account"
    assert entity_of("/data/OpportunityChangeEvent") == "Opportunity"
    assert entity_of("Invoice__ChangeEvent") == "Invoice__c"
    assert entity_of("/data/ChangeEvents") is None and entity_of("") is None


def letter(replay_id: bytes, topic: str = "/data/ChangeEvents") -> DeadLetter:
    found = salvaged("payload", replay_id=replay_id)
    return DeadLetter.of(topic, replay_id, "schema-1", b"\xff\x00raw", "EOFError: truncated", found)


def test_a_dead_letter_is_kept_once_per_replay_id_with_its_raw_payload(tmp_path):
    store = DeadLetterStore(tmp_path, "/data/ChangeEvents")
    assert store.record(letter(b"\x01\x02")) is True
    assert store.record(letter(b"\x01\x02")) is False  # re-delivered after a crash: not counted twice
    assert store.record(letter(b"\x01\x03")) is True
    saved = store.read()
    assert [x.replay_id for x in saved] == ["0102", "0103"]
    assert base64.b64decode(saved[0].payload) == b"\xff\x00raw" and saved[0].reason == "EOFError: truncated"
    assert saved[0].schema_id == "schema-1" and saved[0].entity == "Account" and "GAP_OVERFLOW" in saved[0].action
    assert not list(Path(store.folder.location).glob(".*")), "written through a temporary file renamed into place"


def test_acknowledging_clears_the_dead_letters_seen_so_far_only(tmp_path):
    DeadLetterStore(tmp_path, "/data/ChangeEvents").record(letter(b"\x01"))
    DeadLetterStore(tmp_path, "/data/AccountChangeEvent").record(letter(b"\x01", "/data/AccountChangeEvent"))
    assert len(unacknowledged(tmp_path)) == 2  # the same replay id on two channels: two events
    assert len(acknowledge(tmp_path)) == 2 and unacknowledged(tmp_path) == []
    DeadLetterStore(tmp_path, "/data/ChangeEvents").record(letter(b"\x02"))
    assert [x.replay_id for x in unacknowledged(tmp_path)] == ["02"]


def test_a_schema_that_is_not_even_json_falls_back_to_the_channel_then_to_every_entity():
    found = salvage(
        replay_id=b"\x09",
        schema_id="s",
        payload=b"",
        schema_text="{not json",
        channel="/data/ContactChangeEvent",
        entities=ENTITIES,
    )
    assert [h["entityName"] for h in headers(found)] == ["Contact"]
    found = salvage(
        replay_id=b"\x09", schema_id="s", payload=b"", schema_text="[]", channel="/data/ChangeEvents", entities=ENTITIES
    )
    assert [h["entityName"] for h in headers(found)] == list(ENTITIES)


def test_the_cli_shows_dead_letters_and_opaque_replay_ids_then_acknowledges(tmp_path, capsys):
    from cdc_subscriber.cli import main
    from cdc_subscriber.status import StatusReporter

    reporter = StatusReporter(tmp_path, "/data/ChangeEvents", "data_ChangeEvents")
    reporter.restored(b"\x5f\x0e\x2a\xcf", 0)
    reporter.dead_lettered("replay id 0102: EOFError: truncated", new=True)
    DeadLetterStore(tmp_path, "/data/ChangeEvents").record(letter(b"\x01\x02"))
    assert main(["--state-dir", str(tmp_path), "status"]) == 0
    out = capsys.readouterr().out
    assert "dead letters 1" in out and "5f0e2acf" in out and "last dead letter at" in out and "EOFError" in out
    assert main(["--state-dir", str(tmp_path), "dead-letters"]) == 0
    out = capsys.readouterr().out
    assert "replay id 0102" in out and "1 not acknowledged" in out and "dead-letters --ack" in out
    assert main(["--state-dir", str(tmp_path), "dead-letters", "--ack"]) == 0
    assert "acknowledged 1" in capsys.readouterr().out and unacknowledged(tmp_path) == []


def test_recording_a_letter_writes_that_letter_only_never_the_store_again(tmp_path, monkeypatch):
    written: list[int] = []
    write = resources.storage.write_local_durably
    monkeypatch.setattr(
        resources.storage,
        "write_local_durably",
        lambda path, data, **kw: (written.append(len(data)), write(path, data, **kw))[1],
    )
    store = DeadLetterStore(tmp_path, "/data/ChangeEvents")
    letters = [letter(i.to_bytes(2, "big")) for i in range(60)]
    for x in letters:
        store.record(x)
    one = len(json.dumps(dataclasses.asdict(letters[0])))
    assert len(written) == 60 and sum(written) < 60 * one * 1.1, "linear: each letter written once, alone"
    assert len(store.read()) == 60 and store.count == 60


def test_the_store_keeps_at_most_its_bounds_and_counts_what_it_drops(tmp_path, caplog):
    from shared.subscriber_state import scan

    store = DeadLetterStore(tmp_path, "/data/ChangeEvents", max_letters=3)
    assert [store.record(letter(bytes([i]))) for i in range(5)] == [True] * 5
    assert store.record(letter(b"\x01")) is False  # a kept one re-delivered
    assert len(store.read()) == 3 and store.count == 5
    assert "not kept" in caplog.text and "2 dropped so far" in caplog.text
    found = scan(tmp_path)
    assert (len(found.letters), found.dropped, found.dropped_waiting, found.clean) == (3, 2, 2, False)
    assert DeadLetterStore(tmp_path, "/data/ChangeEvents", max_letters=3).count == 5, "the count survives a restart"
    first = letter(b"\x01", "/data/AccountChangeEvent")
    by_bytes = DeadLetterStore(
        tmp_path, "/data/AccountChangeEvent", max_bytes=len(json.dumps(dataclasses.asdict(first))) + 10
    )
    by_bytes.record(first)
    by_bytes.record(letter(b"\x02", "/data/AccountChangeEvent"))  # would pass the byte bound: counted, not kept
    assert len(by_bytes.read()) == 1 and by_bytes.count == 2
    acknowledge(tmp_path)
    found = scan(tmp_path)
    assert found.clean and found.dropped == 3 and found.dropped_waiting == 0
    store.record(letter(b"\x09"))
    assert scan(tmp_path).dropped_waiting == 1, "a letter dropped after the acknowledgement waits again"


def test_a_file_in_the_store_that_is_not_a_letter_is_skipped_counted_and_logged_never_raised(tmp_path, caplog):
    from shared.subscriber_state import scan

    store = DeadLetterStore(tmp_path, "/data/ChangeEvents")
    store.record(letter(b"\x01"))
    folder = Path(store.folder.location)
    (folder / "0bad.json").write_text('{"topic": "/data/ChangeEvents", "replay_id": "0b')  # cut short
    (folder / "0list.json").write_text("[1, 2]")
    (folder / "0bytes.json").write_bytes(b"\xff\xfe")
    (tmp_path / "dead_letters_acknowledged.json").write_text("{not json")
    caplog.set_level(logging.WARNING)
    found = scan(tmp_path)
    assert [x.replay_id for x in found.letters] == ["01"] and len(found.unreadable) == 3 and not found.clean
    assert all(str(folder) in path for path in found.unreadable) and caplog.text.count("not a dead letter") == 3
    again = DeadLetterStore(tmp_path, "/data/ChangeEvents")  # a subscriber starting over them
    assert again.record(letter(b"\x02")) is True and again.record(letter(b"\x01")) is False
    assert len(acknowledge(tmp_path)) == 2 and scan(tmp_path).waiting == []


def test_a_header_whose_time_is_not_epoch_milliseconds_still_lands_a_gap_for_its_records_at_the_receiving_time():
    for wrong in (1_700_000_000_123 * 1_000_000, 1_700_000_000_123 * 1_000, -1):
        event = account_update()
        event["data"]["payload"]["ChangeEventHeader"]["commitTimestamp"] = wrong
        schema_id, payload = spoil("body", *encode_event(event))
        found = salvage(
            replay_id=b"\x07",
            schema_id=schema_id,
            payload=payload,
            schema_text=schema_json("Account"),
            channel="/data/ChangeEvents",
            entities=ENTITIES,
            now_ms=lambda: 1_800_000_000_000,
        )
        [header] = headers(found)
        assert header["changeType"] == "GAP_UPDATE" and header["recordIds"] == RECORDS
        assert header["commitTimestamp"] == found.commit_ts == 1_800_000_000_000


def test_a_header_whose_entity_is_not_an_api_name_resyncs_the_entity_its_schema_names():
    schema_id, payload = spoil("body", *poison("entity"))  # entityName "../../../...Account", 300 characters
    found = salvage(
        replay_id=b"\x07",
        schema_id=schema_id,
        payload=payload,
        schema_text=schema_json("Account"),
        channel="/data/ChangeEvents",
        entities=ENTITIES,
    )
    [header] = headers(found)
    assert (header["entityName"], header["changeType"], found.entity) == ("Account", "GAP_OVERFLOW", "Account")


def test_a_header_with_a_null_or_missing_time_is_a_problem_not_a_crash():
    from cdc_subscriber.header import header_problems

    header = account_update()["data"]["payload"]["ChangeEventHeader"]
    assert header_problems(header) == {}
    assert set(header_problems(header | {"commitTimestamp": None})) == {"commitTimestamp"}
    assert set(header_problems({k: v for k, v in header.items() if k != "commitTimestamp"})) == {"commitTimestamp"}
    assert set(header_problems(header | {"commitTimestamp": True, "recordIds": [1]})) == {
        "commitTimestamp",
        "recordIds",
    }


def test_a_header_more_than_a_day_ahead_is_a_problem_at_the_bound_the_parse_applies():
    """The subscriber and the parse (tests/spark_ops/test_parse.py) refuse a commit time past the same bound, one
    rule (shared/commit_time.py): an event the subscriber lands is never one ingest quarantines for its time."""
    from cdc_subscriber.header import header_problems

    header = account_update()["data"]["payload"]["ChangeEventHeader"]
    now_ms = 1_800_000_000_000
    assert header_problems(header | {"commitTimestamp": latest_commit_ms(now_ms)}, now_ms) == {}
    late = header_problems(header | {"commitTimestamp": latest_commit_ms(now_ms) + 1}, now_ms)
    assert set(late) == {"commitTimestamp"} and LATEST_COMMIT_RULE in late["commitTimestamp"]
