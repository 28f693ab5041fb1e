"""How long upkeep keeps what holds the org's values in clear besides the tables: the landing archive
(`landing_archive_days`) and acknowledged quarantine rows (`quarantine_days`), then vacuumed, so the values are gone
from the files too; what nobody acknowledged stays."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig, load_config
from replication.quarantine import acknowledge_quarantine
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse
from resources.landing_zone import LandingZone
from salesforce_emulator.landing_lines import event

T0 = 1_763_800_000_000
DAY = 86400


def settings(**changes) -> UpkeepConfig:
    return UpkeepConfig.model_construct(**{**UpkeepConfig().model_dump(), **changes})


def archived(landing: LandingZone) -> list[str]:
    return sorted(p.name for p in Path(landing.archive_path).rglob("*.jsonl"))


def texts_in_files(table_dir: Path) -> str:
    """Every value of every data file in a table's folder (live or not; its Change Data Feed's too), as one text.
    Not the log's checkpoints: their column statistics keep a prefix of old values until the log expires."""
    values = []
    for path in (p for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts):
        for column in pq.read_table(path).columns:
            values += [str(v) for v in column.to_pylist() if v is not None]
    return "\n".join(values)


@pytest.fixture
def platform(tmp_path, spark, sample_dir) -> Platform:
    p = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0)
    p.land([event("Account", "CREATE", ["001000000000001AAA"], T0, tx="a", Name="A")], name="old.jsonl")
    # Quarantined content: upkeep sets this file aside (<zone>_quarantined), never in the archive.
    p.land(["not json SECRET-OLD"], name="bad.jsonl")
    p.land([event("Account", "CREATE", ["001000000000002AAA"], T0 + 1000, tx="b", Name="B")], name="new.jsonl")
    p.run()
    return p


def test_the_landing_archive_keeps_files_for_landing_archive_days(platform):
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    now = datetime.now(UTC)
    upkeep_table(warehouse, CHANGE_EVENTS, settings(), replicated=["Account"], landing=landing, now=now)
    assert archived(landing) == ["new.jsonl", "old.jsonl"]
    old = Path(landing.archive_path) / "old.jsonl"
    os.utime(old, (old.stat().st_atime, (now - timedelta(days=31)).timestamp()))

    kept = upkeep_table(
        warehouse, CHANGE_EVENTS, settings(landing_archive_days=None), replicated=["Account"], landing=landing, now=now
    )
    assert kept["archive_files_deleted"] == 0 and archived(landing) == ["new.jsonl", "old.jsonl"]
    values = upkeep_table(warehouse, CHANGE_EVENTS, settings(), replicated=["Account"], landing=landing, now=now)
    assert values["archive_files_deleted"] == 1 and archived(landing) == ["new.jsonl"]


def test_acknowledged_quarantine_rows_past_quarantine_days_are_deleted_and_vacuumed(platform):
    warehouse, landing = DeltaWarehouse(root=str(platform.warehouse)), LandingZone(path=str(platform.landing))
    [old] = platform.quarantine()
    acknowledge_quarantine(warehouse, old["quarantined_at"])
    platform.land(["not json SECRET-WAITING"], name="later.jsonl")  # quarantined after the acknowledgement
    platform.run()
    assert {q["raw"] for q in platform.quarantine()} == {"not json SECRET-OLD", "not json SECRET-WAITING"}
    quick = settings(vacuum_retention_hours=0)  # below the model's floor: the files go at once

    soon = old["quarantined_at"] + timedelta(days=89)
    values = upkeep_table(warehouse, CHANGE_EVENTS, quick, replicated=["Account"], landing=landing, now=soon)
    assert values["quarantine_rows_deleted"] == 0 and len(platform.quarantine()) == 2

    later = datetime.now(UTC) + timedelta(days=365)  # past both rows' retention; one is acknowledged
    values = upkeep_table(warehouse, CHANGE_EVENTS, quick, replicated=["Account"], landing=landing, now=later)
    assert values["quarantine_rows_deleted"] == 1 and values["quarantine_files_vacuumed"] >= 1
    assert [q["raw"] for q in platform.quarantine()] == ["not json SECRET-WAITING"]
    text = texts_in_files(platform.warehouse / QUARANTINE)
    assert "SECRET-OLD" not in text and "SECRET-WAITING" in text  # gone from the files, not only from the table


def test_retention_settings_are_in_replication_yaml_with_their_defaults(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("options:\n  upkeep: {landing_archive_days: 7, quarantine_days: null}\nobjects: [Account]\n")
    upkeep = load_config(path).options.upkeep
    assert (upkeep.landing_archive_days, upkeep.quarantine_days) == (7.0, None)
    assert (UpkeepConfig().landing_archive_days, UpkeepConfig().quarantine_days) == (30.0, 90.0)
