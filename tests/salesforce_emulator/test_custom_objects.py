"""Generated custom objects (`Emulator(custom_objects=N)`): every API serves them like any object, and orgs built
without them are unchanged."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import fastavro

from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client
from salesforce_emulator.custom_objects import CORE_TYPES, custom_object, custom_object_name
from salesforce_emulator.pubsub_avro import avro_schema, encode_event
from salesforce_emulator.testing import read_landed_events
from salesforce_emulator.workload import Workload

COUNT = 12


def test_custom_objects_are_described_queried_and_publish_change_events(tmp_path: Path) -> None:
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "landing", roll_seconds=3600, custom_objects=COUNT) as emu:
        workload = Workload(emu, seed=3, custom_objects=COUNT, custom_records=4)
        workload.build_org(accounts=5)
        assert workload.touch_each([custom_object_name(n) for n in range(1, COUNT + 1)]) == COUNT
        sf = simple_salesforce_client(emu)

        listed = {o["name"]: o for o in sf.describe()["sobjects"]}
        assert {custom_object_name(n) for n in range(1, COUNT + 1)} <= set(listed)
        assert listed["Thing_003__c"]["custom"] is True and listed["Thing_003__c"]["keyPrefix"] == "a03"

        described = sf.Thing_007__c.describe()
        types = Counter(f["type"] for f in described["fields"] if f["custom"])
        assert set(CORE_TYPES) <= set(types), types  # one of each core type at least
        lookup = next(f for f in described["fields"] if f["type"] == "reference" and f["custom"])
        assert lookup["referenceTo"][0] == "Account" or lookup["referenceTo"][0].startswith("Thing_")
        assert described == sf.Thing_007__c.describe()  # the same object every time

        fields = [f["name"] for f in described["fields"] if f["type"] != "address"]
        records = sf.query_all(f"SELECT {', '.join(fields)} FROM Thing_007__c")["records"]
        assert len(records) == 4 and all(r["Id"].startswith("a07") for r in records)
        assert records[0]["Name"].startswith("Thing_007")

        bulk = list(sf.bulk2.Thing_007__c.query("SELECT Id, Name FROM Thing_007__c"))
        assert sum(text.count("\n") - 1 for text in bulk) == 4  # header + 4 records

        events = read_landed_events(emu.landing_dir) if emu.flush_cdc() else []
        entities = Counter(e["data"]["payload"]["ChangeEventHeader"]["entityName"] for e in events)
        for n in range(1, COUNT + 1):
            assert entities[custom_object_name(n)] == 5  # 4 creates, 1 update
        update = next(
            e
            for e in events
            if e["data"]["payload"]["ChangeEventHeader"]["changeType"] == "UPDATE"
            and e["data"]["payload"]["ChangeEventHeader"]["entityName"] == "Thing_005__c"
        )
        schema_id, payload = encode_event(update)  # the Pub/Sub API's Avro form of the same event
        assert schema_id == custom_object(5).schema_id
        decoded = fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(avro_schema("Thing_005__c")))
        assert decoded["ChangeEventHeader"]["recordIds"] == update["data"]["payload"]["ChangeEventHeader"]["recordIds"]
        changed = update["data"]["payload"]["ChangeEventHeader"]["changedFields"]
        assert {f: decoded[f] for f in changed if f != "LastModifiedDate"} == {
            f: update["data"]["payload"][f] for f in changed if f != "LastModifiedDate"
        }


def test_a_restarted_org_keeps_its_custom_objects_and_others_have_none(tmp_path: Path) -> None:
    with Emulator(tmp_path / "big", custom_objects=3):
        pass
    with Emulator(tmp_path / "big") as restarted:  # no knob: the org still has them
        assert [o.name for o in restarted.store.objects if o.custom] == [custom_object_name(n) for n in (1, 2, 3)]
    with Emulator(tmp_path / "plain") as plain:
        assert not [o for o in plain.store.objects if o.custom]
        names = {o["name"] for o in simple_salesforce_client(plain).describe()["sobjects"]}
        assert not any(n.startswith("Thing_") for n in names)
