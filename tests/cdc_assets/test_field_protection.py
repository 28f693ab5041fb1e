"""`fields` and `hash` in replication.yaml, through every path that writes a value.

Against the real HTTPS emulator, with Dagster's real materialize(), real Spark and Delta: Account replicates only
some fields (`include`; its Website is the left-out value looked for: Description texts repeat in Opportunity and
Case events, stored raw as those objects are not replicated) and hashes its Phone; Contact hashes Email and Phone; Lead
is polled and hashes Email and Phone. The values then arrive by every path: the initial load
(Bulk API 2.0), CDC change events, reconciles of gap events (REST by id), a poll (REST queryAll), a Datastream
backfill file, the changefeed export, and a quarantined line (redacted). The test then reads every file under the
warehouse and the changefeed (Parquet decoded, logs and feeds as text) and finds none of those values in clear,
while the replicas hold exactly their digests (`hash_text`, the one definition).
"""

from __future__ import annotations

import random
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
import yaml
from harness import Platform
from settings import TEST_SPARK_CONF
from test_sync import resource, sensor_requests

from cdc_assets.names import replica_key
from definitions import build_defs
from object_schema.hashing import SALT_ENV, hash_text
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.datastream import backfill_lines
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload

SALT = "pepper-for-tests"
OBJECTS = ["Account", "Contact", "Lead"]
PROTECTION = {
    "Account": {"fields": {"include": ["Name", "Industry", "Phone"]}, "hash": ["Phone"]},
    "Contact": {"hash": ["Email", "Phone"]},
    "Lead": {"mode": "poll", "hash": ["Email", "Phone"]},
}
HASHED = {"Account": ["Phone"], "Contact": ["Email", "Phone"], "Lead": ["Email", "Phone"]}
LEFT_OUT = {"Account": ["Website"]}
pytestmark = pytest.mark.slow


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def _protected_platform(tmp_path: Path, org: Emulator) -> Platform:
    platform = Platform(
        tmp_path / "p",
        None,
        OBJECTS,
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        redact_quarantine=True,
        poll_overlap=2,
        changefeed={"uri": str(tmp_path / "feed"), "initial_scan": True},
    )
    config = yaml.safe_load(platform.config.read_text())
    config["objects"] = [{"name": o, **PROTECTION[o]} for o in OBJECTS]
    platform.config.write_text(yaml.safe_dump(config))
    platform.defs = build_defs(
        config_path=platform.config,
        landing_path=str(platform.landing),
        warehouse_root=str(platform.warehouse),
        spark_conf=platform.spark_conf,
        salesforce=platform.salesforce,
    )
    return platform


def _org_values(org: Emulator, fields: dict[str, list[str]]) -> dict[str, dict[str, dict[str, str]]]:
    """{object: {Id: {field: value}}} of the org now, values only where set."""
    sf = resource(org).client()
    out = {}
    for name, names in fields.items():
        records = sf.query_all(f"SELECT Id, {', '.join(names)} FROM {name}")["records"]
        out[name] = {r["Id"]: {f: r[f] for f in names if r.get(f)} for r in records}
    return out


def _stored_text(roots: list[Path]) -> str:
    """Everything stored under `roots` as text: Parquet files decoded, every other file as it is."""
    parts = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            parts.append(
                str(pq.read_table(path).to_pylist())
                if path.suffix == ".parquet"
                else path.read_bytes().decode("utf-8", "replace")
            )
    return "\n".join(parts)


def test_no_excluded_or_hashed_value_is_stored_in_clear_on_any_path(tmp_path, org, monkeypatch):
    monkeypatch.setenv(SALT_ENV, SALT)
    platform = _protected_platform(tmp_path, org)
    workload = Workload(org, seed=5)
    workload.build_org(accounts=12)
    assert platform.run().success  # initial loads (Bulk API 2.0); Lead polled; first changefeed exports

    org.set_faults(FaultConfig(gap_fraction=0.25, seed=7))
    workload.run(changes=120)  # CDC events, some of them gaps
    org.flush_cdc()
    assert platform.run(close_after=0).success
    org.set_faults(FaultConfig())
    reconciles = [r for r in sensor_requests(platform) if "reconcile" in r.tags["cdc/mode"]]
    assert reconciles, "the gap events should have made records dirty"
    assert all(platform.execute(r).success for r in reconciles)  # REST sObject Collections by id

    platform.land(backfill_lines(org.store, ["Contact"], random.Random(3)))  # Datastream images, every Contact
    contact = next(iter(_org_values(org, {"Contact": ["Email"]})["Contact"]))
    platform.land(
        [
            event(
                "Contact",
                "UPDATE",
                [contact],
                1_763_800_000_000,
                HasOptedOutOfEmail="maybe",
                Email="quarantined.secret@example.org",
            )
        ]
    )  # a value that does not fit: quarantined
    assert platform.run(close_after=0).success  # and a second poll of Lead, and the changefeeds again

    truth = _org_values(org, {n: HASHED.get(n, []) + LEFT_OUT.get(n, []) for n in OBJECTS})
    stored = _stored_text([platform.warehouse, tmp_path / "feed"])
    clear = {v for name in truth for rec in truth[name].values() for v in rec.values() if len(v) >= 10}
    clear.add("quarantined.secret@example.org")
    assert len(clear) > 50
    assert sorted(v for v in clear if v in stored) == []
    assert "<redacted>" in str(platform.quarantine())

    for name, fields in HASHED.items():
        rows = platform.rows(name)
        for record_id, values in truth[name].items():
            for field in fields:
                assert rows[record_id][field] == hash_text(values.get(field), SALT), (name, record_id, field)
    assert set(platform.rows("Account")[next(iter(truth["Account"]))]) >= {"Industry", "Phone"}
    assert not {"Website", "Description", "Type", "Rating"} & set(next(iter(platform.rows("Account").values())))


def test_hashing_a_field_of_an_existing_replica_stops_its_runs_until_a_resync(tmp_path, org, monkeypatch):
    monkeypatch.setenv(SALT_ENV, SALT)
    platform = Platform(tmp_path / "p", None, ["Contact"], TEST_SPARK_CONF, salesforce=resource(org), initial_load=True)
    Workload(org, seed=9).build_org(accounts=4)
    assert platform.run().success  # Email replicated in clear
    config = yaml.safe_load(platform.config.read_text())
    config["objects"] = [{"name": "Contact", "hash": ["Email"]}]
    platform.config.write_text(yaml.safe_dump(config))
    platform.defs = build_defs(
        config_path=platform.config,
        landing_path=str(platform.landing),
        warehouse_root=str(platform.warehouse),
        spark_conf=platform.spark_conf,
        salesforce=platform.salesforce,
    )

    refused = platform.run(raise_on_error=False)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert "hashes Email, but the replica holds values of it in clear" in str(failure.event_specific_data.error)
    resync = dg.RunRequest(
        asset_selection=[replica_key("Contact")],
        run_config={"ops": {replica_key("Contact").to_python_identifier(): {"config": {"mode": "resync"}}}},
    )
    assert platform.execute(resync).success
    assert platform.run().success
    emails = _org_values(org, {"Contact": ["Email"]})["Contact"]
    rows = platform.rows("Contact")
    assert emails and all(rows[i]["Email"] == hash_text(v.get("Email"), SALT) for i, v in emails.items())


def test_an_object_named_with_json_escapes_is_still_protected(tmp_path, spark, sample_dir, monkeypatch):
    """`"Cont\\u0061ct"` is valid JSON for Contact: its lines are parsed with Contact's schema (decided from the
    parsed entity, not a text scan), so its hashed Email is stored hashed, and a quarantined line of it redacted."""
    monkeypatch.setenv(SALT_ENV, SALT)
    platform = Platform(
        tmp_path, sample_dir / "describe", ["Account", "Contact"], TEST_SPARK_CONF, redact_quarantine=True
    )
    config = yaml.safe_load(platform.config.read_text())
    config["objects"][1]["hash"] = ["Email"]
    platform.config.write_text(yaml.safe_dump(config))
    platform.set_options()  # the definitions again, from the file
    escaped = lambda line: line.replace('"entityName": "Contact"', '"entityName": "Cont\\u0061ct"')  # noqa: E731
    kept, bad = "escaped.kept@example.org", "escaped.quarantined@example.org"
    platform.land(
        [
            escaped(event("Contact", "CREATE", ["003000000000001AAA"], 1_763_800_000_000, LastName="Kept", Email=kept)),
            escaped(
                event(
                    "Contact",
                    "CREATE",
                    ["003000000000002AAA"],
                    1_763_800_001_000,
                    LastName="Bad",
                    Email=bad,
                    HasOptedOutOfEmail="maybe",
                )
            ),  # a value that does not fit: quarantined
            event("Account", "CREATE", ["001000000000001AAA"], 1_763_800_002_000, Name="Plain"),
        ]
    )
    assert "Cont\\u0061ct" in next(platform.landing.glob("*.jsonl")).read_text()
    assert platform.run(close_after=0).success

    stored = _stored_text([platform.warehouse])
    assert kept not in stored and bad not in stored
    assert platform.rows("Contact")["003000000000001AAA"]["Email"] == hash_text(kept, SALT)
    [quarantined] = platform.quarantine()
    assert quarantined["source_line"] == 2 and '"Email": "<redacted>"' in quarantined["raw"]
