"""Hostile and careless files dropped into the landing zone while a busy org replicates, under the sensors.

Anyone's subscriber may write the landing zone (docs/design/contract.md §2), so the zone is untrusted input. Midway
through a workload, beside the org's own files, the zone receives one file of every kind the platform must survive:
commit times in micro- and nanoseconds, an entity name of 300 characters, an event naming 200,000 records, a record
id ending in a line feed, gap events for ids the org never had, an entity spelled with JSON escapes, a gzip bomb, a
file that breaks ingest, a symbolic link to a file outside the zone, a file landed again under the name of a retired
one, a file with a byte that is not UTF-8 among the org's events, a truncated gzip of the org's events, and files the
zone does not read (other suffixes, a writer's stale in-flight file).

Then, with nothing done by hand (the sensors' requests run as the daemon runs them), every run succeeds, every
replica equals the org record by record, nothing outside the zone is read, moved or deleted, and every hostile file
is accounted for: a quarantine row naming it, or a counted and reported entry the zone does not read.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.landing_checks import survey_report
from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.landing_zone import SENSOR_NAME as LANDING_SENSOR

pytestmark = pytest.mark.slow

OBJECTS = ["Account", "Contact"]
MARKER = "BREAKS-INGEST-3f9c"  # CDC_FAULT_MARKER: a line holding it makes ingest raise (shared/faults.py)
SECRET = "SECRET-OUTSIDE-THE-ZONE-7d21"
# Hostile but well-formed: gap events the platform reconciles (the org answers for those records, or says it has none).
APPLIED = ("hostile/invented_ids.jsonl", "hostile/escaped_entity.jsonl")


def resource(emu: Emulator) -> SalesforceResource:
    return SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))


def settle(platform: Platform, rounds: int = 12) -> None:
    """Run what the landing and reconciliation sensors ask, as the daemon would, until neither asks anything; every
    run must succeed (`Platform.run_sensor` asserts it)."""
    for _ in range(rounds):
        if not platform.run_sensor(LANDING_SENSOR) + platform.run_sensor():
            return
    raise AssertionError(f"the sensors still ask for runs after {rounds} rounds")


def write_atomically(path: Path, data: bytes) -> Path:
    """As a writer makes a file visible: under an in-flight name, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"_{path.name}"
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and modification time (links not followed)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.lstat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def hostile_lines(org: Emulator, now_ms: int) -> dict[str, list[str]]:
    """Files of lines nobody may trust, by name."""
    account = org.store.snapshot("Account")[0]["Id"]
    contact = org.store.snapshot("Contact")[0]["Id"]
    escaped = event("Contact", "GAP_UPDATE", [contact], now_ms, tx="hostile-escaped").replace(
        '"entityName": "Contact"', '"entityName": "Cont\\u0061ct"'
    )
    return {
        "hostile/micro.jsonl": [event("Account", "UPDATE", [account], now_ms * 1000, tx="hostile-us", Name="us")],
        "hostile/nano.jsonl": [event("Account", "UPDATE", [account], now_ms * 1_000_000, tx="hostile-ns", Name="ns")],
        "hostile/long_entity.jsonl": [
            event("A" * 300, "CREATE", ["001000000000001AAA"], now_ms, tx="hostile-long", Name="long")
        ],
        "hostile/many_ids.jsonl": [
            event("Account", "GAP_UPDATE", [f"001{n:012d}ZZZ" for n in range(200_000)], now_ms, tx="hostile-many")
        ],
        "hostile/newline_id.jsonl": [
            event("Account", "UPDATE", [account + "\n"], now_ms, tx="hostile-nl", Name="phantom")
        ],
        "hostile/invented_ids.jsonl": [
            event("Contact", "GAP_UPDATE", [f"003{n:012d}QQQ" for n in range(1, 6)], now_ms, tx="hostile-invented")
        ],
        "hostile/escaped_entity.jsonl": [escaped],
        "hostile/breaks_ingest.jsonl": [event("Account", "UPDATE", [account], now_ms, tx="hostile-break", Name=MARKER)],
    }


def test_hostile_files_stop_nothing_lose_nothing_and_touch_nothing_outside_the_zone(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_FAULT_MARKER", MARKER)
    outside = tmp_path / "outside"
    write_atomically(
        outside / "secret.jsonl",
        (event("Account", "CREATE", ["001000000000009AAA"], 1_763_800_000_000, Name=SECRET) + "\n").encode(),
    )
    (outside / "folder").mkdir()
    write_atomically(outside / "folder" / "inside.jsonl", b'{"not": "events"}\n')
    untouched = tree(outside)
    landing_dir = tmp_path / "p" / "landing"

    with Emulator(tmp_path / "org", landing_dir=landing_dir) as org:
        workload = Workload(org, seed=34, person_accounts=False)
        workload.build_org(accounts=12)
        platform = Platform(
            tmp_path / "p", None, OBJECTS, TEST_SPARK_CONF, salesforce=resource(org), initial_load=True, close_after=0
        )
        landing = LandingZone(path=str(platform.landing))
        warehouse = DeltaWarehouse(root=str(platform.warehouse))
        settle(platform)  # the initial loads

        workload.run(changes=80)
        org.flush_cdc()
        settle(platform)
        upkeep_table(warehouse, CHANGE_EVENTS, UpkeepConfig(), replicated=OBJECTS, landing=landing)
        retired = sorted(
            p.relative_to(landing.archive_path).as_posix() for p in Path(landing.archive_path).rglob("*.jsonl")
        )
        assert retired, "upkeep should have archived the files ingested so far"

        # Midway: the org goes on, and the hostile files land beside its own.
        before = set(tree(landing_dir))
        for _ in range(3):  # three landing files of the org's own events
            workload.run(changes=30)
            org.flush_cdc()
        fresh = sorted(set(tree(landing_dir)) - before)
        assert len(fresh) >= 3, f"the workload should have landed several files, got {fresh}"
        now_ms = int(time.time() * 1000)
        hostile: dict[str, str] = {}  # name -> how it must be accounted for: "quarantine" or "ignored"
        for name, lines in hostile_lines(org, now_ms).items():
            write_atomically(landing_dir / name, "".join(f"{line}\n" for line in lines).encode())
            hostile[name] = "applied" if name in APPLIED else "quarantine"
        # A decompression bomb: 64 MiB of zeros in ~64 KiB.
        bomb = landing_dir / "hostile/bomb.jsonl.gz"
        with gzip.open(write_atomically(bomb, b""), "wb") as out:
            for _ in range(64):
                out.write(b"\0" * (1 << 20))
        hostile["hostile/bomb.jsonl.gz"] = "quarantine"
        # A link to a file outside the zone, and to a folder outside it.
        (landing_dir / "hostile/link.jsonl").symlink_to(outside / "secret.jsonl")
        (landing_dir / "hostile/linked_folder").symlink_to(outside / "folder")
        hostile["hostile/link.jsonl"] = hostile["hostile/linked_folder"] = "ignored"
        # Files the zone does not read, and a writer's in-flight file left for hours.
        for name in ("hostile/upper.JSONL", "hostile/events.ndjson"):
            write_atomically(
                landing_dir / name, (event("Account", "UPDATE", ["001000000000001AAA"], now_ms) + "\n").encode()
            )
            hostile[name] = "ignored"
        stale = landing_dir / "hostile/_crashed.jsonl"
        stale.write_text("{\n")
        os.utime(stale, (time.time() - 7200, time.time() - 7200))
        hostile["hostile/_crashed.jsonl"] = "ignored"
        # The org's own events, damaged: a byte that is not UTF-8 among them, and a gzip cut short.
        damaged_text = landing_dir / fresh[0]
        lines = damaged_text.read_bytes().splitlines(keepends=True)
        write_atomically(damaged_text, b"".join([*lines[:1], b'{"bad": "\xff\xfe"}\n', *lines[1:]]))
        cut = landing_dir / fresh[1]
        packed = gzip.compress(cut.read_bytes())
        write_atomically(cut.with_name(cut.name + ".gz"), packed[: len(packed) * 2 // 3])
        cut.unlink()
        # The org's events landed again under the name of a file upkeep retired (a writer re-landing after a crash).
        relanded = landing_dir / retired[0]
        relanded.parent.mkdir(parents=True, exist_ok=True)
        os.replace(landing_dir / fresh[2], relanded)

        settle(platform)
        workload.run(changes=60)
        org.flush_cdc()
        settle(platform)

        for name in OBJECTS:
            assert differences(org, name, platform.rows(name)) == [], name
        assert tree(outside) == untouched, "nothing outside the zone may be read, moved or deleted"
        assert (landing_dir / "hostile/link.jsonl").is_symlink()

        ingested = {r["source_file"] for r in platform.change_events()}
        quarantined = {}
        for row in platform.quarantine():
            quarantined.setdefault(row["source_file"], []).append(row["reason"])
        assert not any(SECRET in (row["raw"] or "") for row in platform.quarantine())
        assert not any(SECRET in json.dumps(row, default=str) for row in platform.change_events())
        passed, description, metadata = survey_report(landing.survey(), landing)
        assert not passed
        counts = {k: v.value for k, v in metadata.items()}
        assert counts["symlinks"] == 2 and counts["files_not_events"] == 2 and counts["inflight_stale"] == 1, counts
        for name, how in hostile.items():
            if how == "quarantine":
                assert name in quarantined, f"{name}: no quarantine row names it ({sorted(quarantined)})"
            elif how == "ignored":
                assert name in description or counts["entries_not_read"] > 5, (name, description)
            else:
                assert name in ingested, f"{name}: its events should be in change_events"
        assert fresh[0] in quarantined and any("UTF-8" in r or "utf-8" in r for r in quarantined[fresh[0]])
        assert fresh[1] + ".gz" in quarantined
        assert retired[0] in ingested and fresh[0] in ingested and fresh[1] + ".gz" in ingested
