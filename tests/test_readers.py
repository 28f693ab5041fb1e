"""Every kind of table the platform writes, read by readers that are not delta-rs, equals what delta-rs reads.

The readers: DuckDB's Delta extension (`delta_scan`, loaded offline from PyPI's `duckdb-extension-delta` by
`resources.replicas.duckdb_delta`) and polars (`read_delta` and `scan_delta`). The reference: delta-rs itself,
through DataFusion (`QueryBuilder`).

The tables come from one build through the real platform: an org in the HTTPS emulator, Account replicated with
its history table, Dagster's real `materialize()`, Spark and delta-rs. After each stage the warehouse is copied
aside, so each table is read as that stage left it:

- `initial_load`: the first run's resync (Bulk API queryAll, committed as a new table from staged files), its
  history's snapshot versions, change_events;
- `merged`: CDC updates (a field set to null among them), a create and a delete applied by merge, a line that is
  not JSON quarantined;
- `deleted`: a delete (soft: the row stays, `_sf_deleted`) and an undelete, by merge;
- `resynced`: a resync requested as the sensor does, replacing the table by an overwrite;
- `upkept`: one more create (a second file in the replica's bucket), the upkeep jobs (compaction), then a vacuum
  that deletes the replaced files at once.

The changefeed is JSON files, not a Delta table (cdc_assets/changefeed/export.py): not read here.

The same build pins the table protocol (resources/delta_protocol.py): every table it wrote is inside the readers'
allow-list, and once someone else turns a feature on, the check `table_protocol` fails on the asset of that table
and the next run refuses to write it.

Compared as Python values, by column name, rows in any order. Normalised only where a reader documents another
Arrow mapping than delta-rs: timestamps, which DuckDB returns as `TIMESTAMP WITH TIME ZONE` in the session's time
zone (`Etc/UTC` here) and polars as `Datetime("us", "UTC")`, compare as instants. Types that only change the Arrow
layout (delta-rs' `string_view` against `string` / `large_string`, `list` against `large_list`) give the same
Python values and need nothing.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import dagster as dg
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, TableFeatures
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.assets import CHANGE_EVENTS_KEY, replica_key
from cdc_assets.table_protocol import TABLE_PROTOCOL
from cdc_assets.upkeep.jobs import CE_JOB, REPLICAS_JOB
from replication.history.stage import history_name
from replication.upkeep.vacuum import vacuum
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse
from resources.delta_protocol import Protocol
from resources.replicas import duckdb_delta
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.work import mode_run_config

NAME = "Account"
HISTORY = history_name(NAME)
TABLES = (NAME, HISTORY, CHANGE_EVENTS, QUARANTINE)
STAGES = ("initial_load", "merged", "deleted", "resynced", "upkept")
pytestmark = pytest.mark.slow


def _apply(org: Emulator, platform: Platform, *changes) -> None:
    """Org transactions (one each), published and applied by one landing run."""
    for change in changes:
        with org.store.transaction() as tx:
            change(tx)
    org.flush_cdc()
    assert platform.run().success


class Build(NamedTuple):
    stages: dict[str, Path]  # the warehouse as each stage left it, by stage
    ids: list[str]  # the org's Accounts before the changes, sorted
    platform: Platform  # as the last stage left it (its org stopped)


@pytest.fixture(scope="module")
def build(tmp_path_factory, spark) -> Build:
    """The warehouse as each stage left it (module docstring), by stage."""
    root = tmp_path_factory.mktemp("readers")
    saved: dict[str, Path] = {}

    def save(stage: str, platform: Platform) -> None:
        saved[stage] = root / "stages" / stage
        shutil.copytree(platform.warehouse, saved[stage])

    with Emulator(root / "org", landing_dir=root / "p" / "landing") as org:
        Workload(org, seed=38, person_accounts=False).build_org(
            accounts=6, contacts_per_account=0, opportunities_per_account=0, cases_per_account=0, leads=0
        )
        platform = Platform(
            root / "p",
            None,
            [NAME],
            TEST_SPARK_CONF,
            salesforce=SalesforceResource(
                instance_url=org.instance_url, access_token=org.token, ca_bundle=str(org.ca_file)
            ),
            initial_load=True,
            history=True,
            close_after=0,
        )
        ids = sorted(org.store.ids(NAME))
        assert platform.run().success
        save("initial_load", platform)

        platform.land(["this line is not JSON"])
        _apply(
            org,
            platform,
            lambda tx: (tx.update(NAME, ids[0], {"Name": "Renamed"}), tx.create(NAME, {"Name": "New"})),
            lambda tx: tx.update(NAME, ids[1], {"NumberOfEmployees": 42, "AnnualRevenue": 1.5, "Website": None}),
            lambda tx: tx.delete(NAME, [ids[3]]),
        )
        save("merged", platform)

        _apply(org, platform, lambda tx: tx.delete(NAME, [ids[2]]), lambda tx: tx.undelete(NAME, [ids[3]]))
        save("deleted", platform)

        resync = dg.RunRequest(asset_selection=[replica_key(NAME)], run_config=mode_run_config({NAME: "resync"}))
        assert platform.execute(resync).success
        save("resynced", platform)

        _apply(org, platform, lambda tx: tx.create(NAME, {"Name": "After the resync"}))  # a second file to compact
        for name in (REPLICAS_JOB, CE_JOB):
            job = platform.defs.resolve_job_def(name)
            assert job.execute_in_process(instance=platform.instance).success
        warehouse = DeltaWarehouse(root=str(platform.warehouse))
        # The job keeps a week of time travel; here the files compaction replaced are deleted at once.
        vacuumed = {name: vacuum(warehouse, name, retention_hours=0).files_deleted for name in TABLES}
        assert vacuumed[NAME] and vacuumed[HISTORY] and vacuumed[CHANGE_EVENTS], vacuumed
        save("upkept", platform)
    return Build(saved, ids, platform)


@pytest.fixture(scope="module")
def stages(build: Build) -> dict[str, Path]:
    return build.stages


def delta_rs_rows(path: Path, query: str = "SELECT * FROM t") -> pa.Table:
    """What delta-rs reads: DataFusion over the table (`t` in `query`)."""
    return pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute(query).read_all())


@pytest.fixture(scope="module")
def duckdb():
    """One DuckDB connection for the module: loading the extension (80 MB) costs a few CPU seconds."""
    with duckdb_delta() as connection:
        yield connection


@pytest.fixture(scope="module")
def readers(duckdb) -> dict[str, Callable[[Path], pa.Table]]:
    return {
        "duckdb": lambda path: duckdb.sql(f"SELECT * FROM delta_scan('{path.as_posix()}')").to_arrow_table(),
        "polars": lambda path: pl.read_delta(str(path)).to_arrow(),
        "polars_lazy": lambda path: pl.scan_delta(str(path)).collect().to_arrow(),
    }


def _value(value):
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, tuple):  # a map entry
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value


def comparable(rows: pa.Table) -> list[str]:
    """The rows as sorted JSON texts, columns by name, values normalised (module docstring)."""
    return sorted(
        json.dumps({k: _value(v) for k, v in row.items()}, sort_keys=True, default=str) for row in rows.to_pylist()
    )


@pytest.mark.parametrize("reader", ["duckdb", "polars", "polars_lazy"])
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", TABLES)
def test_a_reader_reads_what_delta_rs_reads(stages, readers, stage: str, name: str, reader: str):
    path = stages[stage] / name
    if not (path / "_delta_log").exists():
        pytest.skip(f"{name} has no table at {stage}")
    expected = delta_rs_rows(path)
    got = readers[reader](path)
    assert sorted(got.column_names) == sorted(expected.column_names)
    assert got.num_rows == expected.num_rows
    assert comparable(got) == comparable(expected)


def _sql(path: Path, query: str) -> list[dict]:
    return delta_rs_rows(path, query).to_pylist()


def _operations(path: Path) -> list[str]:
    return [commit["operation"] for commit in DeltaTable(str(path)).history()]


def test_each_stage_holds_the_table_state_it_names(build: Build):
    """The comparisons above are only as good as the tables they read: each stage is what its name says."""
    stages, ids = build.stages, build.ids
    live = "SELECT Id, Name, NumberOfEmployees, Website, _sf_deleted, _sf_source FROM t ORDER BY Id"

    loaded = _sql(stages["initial_load"] / NAME, live)
    assert [r["Id"] for r in loaded] == ids and {r["_sf_source"] for r in loaded} == {"snapshot"}
    assert _operations(stages["initial_load"] / NAME)[-1] == "CREATE TABLE"
    assert len(_sql(stages["initial_load"] / HISTORY, "SELECT Id FROM t")) == len(ids)

    merged = {r["Id"]: r for r in _sql(stages["merged"] / NAME, live)}
    assert merged[ids[0]]["Name"] == "Renamed" and merged[ids[3]]["_sf_deleted"] is True
    assert merged[ids[1]]["NumberOfEmployees"] == 42 and merged[ids[1]]["Website"] is None
    assert [r["Name"] for r in merged.values() if r["Id"] not in ids] == ["New"]
    assert _sql(stages["merged"] / QUARANTINE, "SELECT raw FROM t") == [{"raw": "this line is not JSON"}]
    assert _operations(stages["merged"] / NAME)[0] == "MERGE"

    deleted = {r["Id"]: r for r in _sql(stages["deleted"] / NAME, live)}
    assert deleted[ids[2]]["_sf_deleted"] is True and deleted[ids[3]]["_sf_deleted"] is False
    assert len(_sql(stages["deleted"] / HISTORY, "SELECT Id FROM t")) > len(deleted)  # earlier versions kept

    [resync] = DeltaTable(str(stages["resynced"] / NAME)).history(1)
    assert resync["operation"] == "WRITE" and resync["operationParameters"]["mode"] == "Overwrite"

    for name in (NAME, HISTORY, CHANGE_EVENTS):
        assert {"OPTIMIZE", "VACUUM END"} <= set(_operations(stages["upkept"] / name)), name
        assert len(DeltaTable(str(stages["upkept"] / name)).file_uris()) == 1, name


def test_every_table_the_platform_wrote_is_inside_the_protocol_allow_list(stages):
    for stage, warehouse in stages.items():
        for name in TABLES:
            if (warehouse / name / "_delta_log").exists():
                assert Protocol.of(DeltaTable(str(warehouse / name))).problems() == [], (stage, name)


def _protocol_checks(platform: Platform) -> dict[dg.AssetKey, dg.AssetCheckEvaluation]:
    """`table_protocol` of every asset, run alone against the tables as they are (the UI's "Execute checks")."""
    result = dg.materialize(
        platform.executable_assets() + list(platform.defs.asset_checks),
        resources=platform.defs.resources,
        instance=platform.instance,
        selection=dg.AssetSelection.checks(
            *(k for c in platform.defs.asset_checks for k in c.check_keys if k.name == TABLE_PROTOCOL)
        ),
        raise_on_error=False,
    )
    return {e.asset_key: e for e in result.get_asset_check_evaluations()}


def test_a_feature_turned_on_by_someone_else_fails_table_protocol_and_the_next_run_writes_nothing(build: Build):
    platform = build.platform
    checks = _protocol_checks(platform)
    assert set(checks) == {replica_key(NAME), CHANGE_EVENTS_KEY} and all(e.passed for e in checks.values())

    warehouse = platform.warehouse
    DeltaTable(str(warehouse / NAME)).alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    DeltaTable(str(warehouse / HISTORY)).alter.add_feature(
        TableFeatures.RowTracking, allow_protocol_versions_increase=True
    )
    DeltaTable(str(warehouse / QUARANTINE)).alter.add_feature(
        TableFeatures.DomainMetadata, allow_protocol_versions_increase=True
    )
    checks = _protocol_checks(platform)
    replica, events = checks[replica_key(NAME)], checks[CHANGE_EVENTS_KEY]
    assert not replica.passed and not events.passed
    assert f"Delta table {NAME} now requires reader features deletionVectors" in replica.description
    assert f"Delta table {HISTORY} now requires writer features rowTracking" in replica.description
    assert f"Delta table {QUARANTINE} now requires writer features domainMetadata" in events.description

    before = {name: platform.table_version(name) for name in (NAME, HISTORY)}
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    platform.land([event(NAME, "UPDATE", [build.ids[0]], now_ms, tx="refused", Name="Not written")])
    result = platform.run(raise_on_error=False)
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == replica_key(NAME).to_python_identifier()
    assert "now requires reader features deletionVectors" in failure.step_failure_data.error.to_string()
    assert {name: platform.table_version(name) for name in (NAME, HISTORY)} == before
    assert _sql(warehouse / NAME, f"SELECT Name FROM t WHERE Id = '{build.ids[0]}'") == [{"Name": "Renamed"}]


def test_duckdb_delta_says_which_pair_to_install_when_the_extension_was_built_for_another_duckdb(monkeypatch):
    import duckdb

    built_for = duckdb.__version__
    monkeypatch.setattr(duckdb, "__version__", "0.0.1")
    with pytest.raises(RuntimeError, match=rf"pip install 'duckdb=={re.escape(built_for)}' or pip install"):
        duckdb_delta()
