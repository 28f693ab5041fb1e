"""Upkeep of real tables written by the real platform (Dagster's `materialize()`, Spark, delta-rs): compaction
and vacuum shrink the file count and leave rows, checkpoint state and dedup as they were; payload retention trims
only rows every reader is done with and keeps their identity."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.names import history_key
from cdc_assets.upkeep.jobs import REPLICAS_JOB, upkeep_table
from replication.apply import APPLY_APP
from replication.config import UpkeepConfig
from replication.history.stage import history_name
from replication.state import IngestState, ReplicaState
from replication.upkeep.compact import Footprint, compact
from replication.upkeep.retention import replay_floor, trim_payloads
from replication.upkeep.vacuum import vacuum
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from salesforce_emulator.landing_lines import event

T0 = 1_763_800_000_000  # Nov 2025: far older than any retention horizon
IDS = [f"001{n:012d}AAA" for n in range(1, 5)]  # one layout bucket: each run adds a file to it


def rows(path, sql: str = "select * from t") -> list[dict]:
    return pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute(sql).read_all()).to_pylist()


def replica(platform: Platform) -> dict[str, dict]:
    return {r["Id"]: {k: v for k, v in r.items() if k != "_sf_synced_at"} for r in rows(platform.warehouse / "Account")}


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    """Four runs of Account events, one file each: many small files in change_events and the replica (inserts
    only, so each merge adds a file instead of rewriting the bucket's)."""
    p = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0)
    for n, rid in enumerate(IDS):
        p.land([event("Account", "CREATE", [rid], T0 + n * 1000, tx=f"c{n}", Name=f"A{n}")])
        p.run()
    return p


def test_compaction_and_vacuum_shrink_files_and_keep_rows_and_state(platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    before_rows = replica(platform)
    before_state = ReplicaState.read(warehouse, warehouse.table("Account"))
    applied = warehouse.table("Account").transaction_version(APPLY_APP)
    ce_state = IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS))

    done = compact(warehouse, CHANGE_EVENTS)
    assert done.before.files >= len(IDS) and done.after.files == 1  # one entity partition: one file
    replica_done = compact(warehouse, "Account")
    assert replica_done.after.files < replica_done.before.files
    vacuumed = vacuum(warehouse, "Account", retention_hours=1)
    assert vacuumed.files_deleted == 0  # the replaced files are younger than an hour: kept for time travel

    assert replica(platform) == before_rows
    table = warehouse.table("Account")
    assert ReplicaState.read(warehouse, table) == before_state  # found through cdc_state.*, past the OPTIMIZE
    assert table.transaction_version(APPLY_APP) == applied
    assert IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)) == ce_state

    # The platform goes on over compacted tables: a new event applies, an old one landed again is a duplicate.
    platform.land([event("Account", "UPDATE", [IDS[1]], T0 + 9000, tx="later", Name="after upkeep")])
    platform.land([_first_line(platform)], name="again.jsonl")
    result = platform.run()
    assert platform.materialization(result, "change_events")["duplicates"] == 1
    assert replica(platform)[IDS[1]]["Name"] == "after upkeep"


def _first_line(platform: Platform) -> str:
    return (platform.landing / "00001.jsonl").read_text().splitlines()[0]


def test_vacuum_deletes_files_older_than_retention(platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    compacted = compact(warehouse, "Account")

    def data_files() -> int:  # not the Change Data Feed's files (_change_data/) nor log checkpoints
        files = (platform.warehouse / "Account").rglob("*.parquet")
        return sum(not {"_change_data", "_delta_log"} & set(p.parts) for p in files)

    on_disk = data_files()
    assert compacted.files_removed >= len(IDS)
    # Retention 0 h (the config requires >= 1 h; the function takes what it is given): the files compaction
    # replaced are deleted.
    assert vacuum(warehouse, "Account", retention_hours=0).files_deleted == compacted.files_removed
    assert data_files() == on_disk - compacted.files_removed
    assert len(replica(platform)) == len(IDS)


def test_retention_trims_payloads_below_the_floor_and_keeps_identities(platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    # A transaction still held back (close_after large, newest transaction open) stays whole: the run applied
    # nothing, so the replica's checkpoint (its floor) stays below it.
    platform.land([event("Account", "UPDATE", [IDS[2]], T0 + 20_000, tx="open", Name="held")])
    assert platform.materialization(platform.run(close_after=3600), "Account")["held"] == 1
    floor = replay_floor(warehouse, "Account")
    assert floor == len(IDS)
    ce = platform.warehouse / CHANGE_EVENTS
    total = rows(ce, "select count(*) as n from t")[0]["n"]
    trimmed = trim_payloads(warehouse, ["Account"], retention_hours=84, now=datetime.now(UTC))
    assert trimmed.floors == {"Account": floor}
    after = rows(ce, "select transaction_key, _ingest_seq, fields, set_fields, event_key from t")
    assert len(after) == total  # no row removed
    assert trimmed.rows_trimmed == sum(r["_ingest_seq"] <= floor for r in after) > 0
    assert all((not r["fields"]) == (r["_ingest_seq"] <= floor) for r in after)
    assert [bool(r["fields"]) for r in after if r["transaction_key"] == "open"] == [True]  # held: kept
    assert all(r["event_key"] and r["set_fields"] for r in after)  # identities and field names stay

    # Nothing newer than the horizon is touched, whatever the floor.
    assert (
        trim_payloads(
            warehouse, ["Account"], retention_hours=84, now=datetime.fromtimestamp(T0 / 1000, UTC)
        ).rows_trimmed
        == 0
    )

    # Dedup stays exact: the first file landed again after its payloads were trimmed is all duplicates.
    state = replica(platform)
    platform.land((platform.landing / "00001.jsonl").read_text().splitlines(), name="relanded.jsonl")
    result = platform.run(close_after=0)
    assert platform.materialization(result, "change_events")["duplicates"] == 1
    assert platform.materialization(result, "change_events")["ingested"] == 0
    after_run = replica(platform)
    assert after_run[IDS[2]]["Name"] == "held"  # the held transaction applied from its kept payload
    assert {k: v for k, v in after_run.items() if k != IDS[2]} == {k: v for k, v in state.items() if k != IDS[2]}


def test_no_table_means_no_floor_and_no_trim(tmp_path, platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    # A replicated object whose replica does not exist yet may replay every event: its rows keep their payloads.
    assert replay_floor(warehouse, "Contact") == 0
    trimmed = trim_payloads(warehouse, ["Account"], retention_hours=84, now=datetime.now(UTC))
    assert trimmed.rows_trimmed > 0
    assert (
        trim_payloads(DeltaWarehouse(root=str(tmp_path / "none")), [], retention_hours=84, now=datetime.now(UTC))
        is None
    )


def test_upkeep_table_reports_what_it_did(platform):
    warehouse = DeltaWarehouse(root=str(platform.warehouse))
    values = upkeep_table(warehouse, CHANGE_EVENTS, UpkeepConfig(), replicated=["Account"])
    assert values["files_before"] > values["files_after"] == 1
    assert values["bytes_after"] > 0 and values["rows_trimmed"] > 0
    assert upkeep_table(warehouse, "Nothing", UpkeepConfig()) == {}


def test_retention_below_the_org_redelivery_window_is_refused():
    with pytest.raises(ValueError, match="at least 84"):
        UpkeepConfig(change_events_retention_hours=72)


def test_the_upkeep_job_of_an_object_with_history_keeps_its_history_table_up_too(tmp_path, spark, sample_dir):
    p = Platform(tmp_path, sample_dir / "describe", ["Account"], TEST_SPARK_CONF, close_after=0, history=True)
    for n, rid in enumerate(IDS):  # a version per run: the history table gains a file each time
        p.land([event("Account", "CREATE", [rid], T0 + n * 1000, tx=f"c{n}", Name=f"A{n}")])
        p.run()
    warehouse = DeltaWarehouse(root=str(p.warehouse))
    history = history_name("Account")
    versions = sorted(p.table(history), key=lambda r: r["Id"])
    files_before = Footprint.of(warehouse.table(history)).files

    result = p.defs.resolve_job_def(REPLICAS_JOB).execute_in_process(instance=p.instance)

    assert result.success
    observed = {
        e.asset_observation_data.asset_observation.asset_key: e.asset_observation_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    }
    kept = {k: v.value for k, v in observed[history_key("Account")].metadata.items()}
    assert kept["files_before"] == files_before >= len(IDS) and kept["files_after"] < files_before
    assert Footprint.of(warehouse.table(history)).files == kept["files_after"]
    assert sorted(p.table(history), key=lambda r: r["Id"]) == versions  # the same versions, fewer files
    # The history goes on over its compacted table: the next run's version closes the current one.
    p.land([event("Account", "UPDATE", [IDS[0]], T0 + 9000, tx="later", Name="after upkeep")])
    p.run()
    of_first = sorted((r for r in p.table(history) if r["Id"] == IDS[0]), key=lambda r: r["_valid_from"])
    assert [r["Name"] for r in of_first] == ["A0", "after upkeep"] and of_first[0]["_valid_to"] is not None
