"""A landing zone holding CometD files and Google Datastream files at once, through Dagster's real materialize():
the replicas equal the emulator org field by field (spark_ops/datastream.py, salesforce_emulator/datastream.py)."""

from __future__ import annotations

import json
import random

import dagster as dg
import pytest
from harness import Platform, comparable
from org_compare import differences
from settings import TEST_SPARK_CONF

from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.datastream import MixedLanding, backfill_lines
from salesforce_emulator.workload import Workload
from salesforce_emulator.workload_backends import Op
from sensors.reconciliation import SENSOR_NAME
from shared.names import API_NAME_RULE

OBJECTS = ["Account", "Contact", "Opportunity"]
TRICKY = [
    "Line 1\nLine 2 \"quoted\" and 'single'\r\nback\\slash\ttab",
    "Zürich, 東京, Réunion: naïve café \u2028 (a line separator inside the text)",
    "x" * 5000 + "\n" + "long multi-line text, end",
]


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org") as emu:  # no landing dir: the test lands the files, in the order it chooses
        yield emu


def make_platform(tmp_path, emu: Emulator) -> Platform:
    salesforce = SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=emu.ca_file)
    return Platform(tmp_path / "p", None, OBJECTS, TEST_SPARK_CONF, salesforce=salesforce)


def assert_equal_to_org(platform: Platform, emu: Emulator) -> None:
    for name in OBJECTS:
        assert differences(emu, name, platform.rows(name), limit=5) == [], name


def replica_counts(platform: Platform, result, key: str) -> int:
    return sum(platform.materialization(result, o)[key] for o in OBJECTS)


def rerun_of(lines: list[str], rng: random.Random) -> list[str]:
    """The same backfill read again by Datastream: the same images under new uuids."""
    return [
        json.dumps(json.loads(line) | {"uuid": f"rerun-{rng.getrandbits(64):016x}"}, ensure_ascii=False)
        for line in lines
    ]


def as_format(mixed: MixedLanding, workload: Workload, datastream: bool, ops: list[Op]) -> None:
    mixed.datastream_share, mixed.both_share = (1.0 if datastream else 0.0), 0.0
    workload.backend.execute(ops)
    mixed.datastream_share, mixed.both_share = 0.5, 0.15


def tricky_edits(workload: Workload, mixed: MixedLanding, emu: Emulator) -> None:
    """Texts with quotes, unicode, line breaks and 5,000 characters, sent once as CometD, once as Datastream;
    deletes and undeletes, each crossing the formats."""
    ids = sorted(emu.store.ids("Account"))[: len(TRICKY)]
    for datastream in (False, True):
        for record_id, text in zip(ids, TRICKY):
            as_format(
                mixed,
                workload,
                datastream,
                [Op("update", "Account", record_id, {"Description": f"{text} ({datastream})"})],
            )
    contacts = sorted(emu.store.ids("Contact"))
    for first, record_id in zip((True, False), contacts[-2:]):
        as_format(mixed, workload, first, [Op("delete", "Contact", record_id)])
        as_format(mixed, workload, not first, [Op("undelete", "Contact", record_id)])
    as_format(mixed, workload, True, [Op("delete", "Contact", contacts[-3])])


def test_cometd_and_datastream_files_in_one_landing_zone_replicate_the_org(tmp_path, spark, org):
    rng = random.Random(13)
    # No person accounts: their CDC events leave records dirty until a reconcile fetches their Names, and this
    # test compares the replica with the org after the apply runs alone.
    workload = Workload(org, seed=7, long_text=True, person_accounts=False)
    workload.build_org(accounts=12, contacts_per_account=2, opportunities_per_account=1, cases_per_account=0, leads=6)
    early_backfill = backfill_lines(org.store, OBJECTS, rng)  # records no event will ever create
    mixed = MixedLanding(org.store, OBJECTS, datastream_share=0.5, both_share=0.15, seed=5)
    org.store.add_listener(mixed)
    workload.run(changes=70)
    tricky_edits(workload, mixed, org)
    assert mixed.cometd and mixed.datastream
    platform = make_platform(tmp_path, org)

    # 1. the backfill, both formats' events, a Datastream file landed twice, and a file of bad Datastream lines
    platform.land(early_backfill, "datastream/backfill-1.jsonl")
    platform.land(mixed.cometd, "cometd/0001.jsonl")
    platform.land(mixed.datastream, "datastream/0001.jsonl")
    platform.land(mixed.datastream, "datastream/0001-again.jsonl")
    bad = json.loads(mixed.datastream[0])
    platform.land(
        [
            json.dumps({k: v for k, v in bad.items() if k != "uuid"}),
            json.dumps(bad | {"uuid": "bad-payload", "payload": {"Name": "no Id"}}),
            json.dumps(
                bad | {"uuid": "bad-object", "object": "Not An Object", "source_metadata": {"change_type": "UPDATE"}}
            ),
        ],
        "datastream/bad.jsonl",
    )
    leads = backfill_lines(org.store, ["Lead"], rng)  # an object that is not replicated: stored, counted ignored
    platform.land(leads, "datastream/leads.jsonl")
    first = platform.run(close_after=0)
    assert_equal_to_org(platform, org)
    ce = platform.materialization(first, "change_events")
    assert ce["duplicates"] >= len(mixed.datastream) and ce["lines_quarantined"] == 3
    assert ce["ignored"] == len(leads) > 0
    assert sorted(q["reason"] for q in platform.quarantine()) == [
        "Datastream event has no uuid",
        f"Datastream object 'Not?An?Object' (13 characters) is not a Salesforce object name: {API_NAME_RULE}",
        "Datastream payload has no Id",
    ]
    assert replica_counts(platform, first, "late") == 0 and replica_counts(platform, first, "gaps") == 0
    sources = {r["_sf_source"] for o in OBJECTS for r in platform.rows(o).values()}
    assert sources == {"cdc", "snapshot"}

    # 2. Datastream runs the backfill again: old images under new uuids. Superseded, never late, nothing written.
    before = {o: comparable(platform.rows(o)) for o in OBJECTS}
    platform.land(rerun_of(early_backfill, rng), "datastream/backfill-1-rerun.jsonl")
    rerun = platform.run(close_after=0)
    assert {o: comparable(platform.rows(o)) for o in OBJECTS} == before
    assert replica_counts(platform, rerun, "superseded") == len(early_backfill)
    assert replica_counts(platform, rerun, "rows_written") == 0

    # 3. more changes; a backfill read after them lands *before* their (older) event files
    mixed.cometd, mixed.datastream = [], []
    workload.run(changes=50)
    late_backfill = backfill_lines(org.store, OBJECTS, rng)
    platform.land(late_backfill, "datastream/backfill-2.jsonl")
    newest = platform.run(close_after=0)
    assert_equal_to_org(platform, org)
    assert replica_counts(platform, newest, "dirty_skipped") == 0
    platform.land(mixed.cometd, "cometd/0002.jsonl")
    platform.land(mixed.datastream, "datastream/0002.jsonl")
    older = platform.run(close_after=0)
    assert_equal_to_org(platform, org)
    assert replica_counts(platform, older, "superseded") > 0
    assert replica_counts(platform, older, "late") == 0 and replica_counts(platform, older, "gaps") == 0
    assert all(r["_sf_dirty_since"] is None for o in OBJECTS for r in platform.rows(o).values())

    # 4. an image with a value that does not fit its type: quarantined, the record reconciled from the org
    mixed.datastream = []
    as_format(
        mixed, workload, True, [Op("update", "Account", sorted(org.store.ids("Account"))[0], {"NumberOfEmployees": 42})]
    )
    image = json.loads(mixed.datastream[-1])
    image["payload"]["NumberOfEmployees"] = "many"
    platform.land([json.dumps(image, ensure_ascii=False)], "datastream/bad-value.jsonl")
    platform.run(close_after=0)
    record = platform.rows("Account")[image["payload"]["Id"]]
    assert record["_sf_dirty_since"] is not None
    sensor = platform.defs.get_sensor_def(SENSOR_NAME)
    context = dg.build_sensor_context(
        instance=platform.instance, resources=platform.defs.resources, definitions=platform.defs
    )
    requests = sensor(context).run_requests or []
    assert requests and all(platform.execute(r).success for r in requests)
    assert_equal_to_org(platform, org)
    assert any(q["reason"] == "field NumberOfEmployees value 'many' is not a valid int" for q in platform.quarantine())
