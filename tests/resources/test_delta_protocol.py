"""resources.delta_protocol: the tables the platform makes are inside the readers' allow-list; a table someone else
gave a feature outside it (delta-rs' own `alter.add_feature` / `set_table_properties` here, as Spark's ALTER TABLE
would) is refused before any write of the platform, saying what to do, and the check `table_protocol` fails."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from cdc_assets.table_protocol import check_table_protocol
from cdc_assets.upkeep.jobs import upkeep_table
from replication.config import UpkeepConfig
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, read_table
from resources.delta_protocol import APPEND_ONLY, Protocol, UnsupportedProtocol

A, B = "001000000000001AAA", "001000000000002AAA"
BUCKET = "0010000000000"


def rows(ids: list[str], name: str) -> pa.Table:
    return pa.table({"Id": ids, "Name": [name] * len(ids), "_sf_bucket": [BUCKET] * len(ids)})


def made(warehouse: DeltaWarehouse, name: str) -> DeltaTable:
    """A table as the platform makes one (a replica gets its Change Data Feed: writer version 4)."""
    return warehouse.append(
        name, rows([A], "first"), read=None, partition_by=["_sf_bucket"], key="k", state={}, txns={}
    )


def upsert(warehouse: DeltaWarehouse, name: str, read: DeltaTable) -> DeltaTable:
    return warehouse.upsert(
        name,
        rows([A, B], "second"),
        read=read,
        key_column="Id",
        partition_column="_sf_bucket",
        partition_values=[BUCKET],
        key="k",
        state={},
        txns={},
    )


@pytest.mark.parametrize("name", ["Account", CHANGE_EVENTS, QUARANTINE, "Account__history"])
def test_the_tables_the_platform_makes_and_writes_are_inside_the_allow_list(tmp_path, name):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    table = upsert(warehouse, name, made(warehouse, name))
    assert Protocol.of(table).problems() == []
    assert check_table_protocol({name: table}).passed


# Each as someone else turns it on; what it needs, as the refusal names it.
FOREIGN = {
    "deletionVectors": lambda t: t.alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    ),
    "columnMapping": lambda t: t.alter.add_feature(TableFeatures.ColumnMapping, allow_protocol_versions_increase=True),
    "rowTracking": lambda t: t.alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True),
    "domainMetadata": lambda t: t.alter.add_feature(
        TableFeatures.DomainMetadata, allow_protocol_versions_increase=True
    ),
    "timestampNtz": lambda t: t.alter.add_feature(
        TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True
    ),
    APPEND_ONLY: lambda t: t.alter.set_table_properties({APPEND_ONLY: "true"}),
}


@pytest.mark.parametrize("feature", sorted(FOREIGN))
def test_a_feature_turned_on_by_someone_else_is_refused_before_the_write_and_fails_the_check(tmp_path, feature):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    made(warehouse, "Account")
    FOREIGN[feature](DeltaTable(str(tmp_path / "Account")))
    table = warehouse.table("Account")
    version = table.version()

    with pytest.raises(UnsupportedProtocol) as refused:
        upsert(warehouse, "Account", table)
    message = str(refused.value)
    assert message.startswith("Delta table Account now requires ") and feature in message
    assert "DROP FEATURE" in message and "runbook" in message  # what to do
    assert warehouse.table("Account").version() == version  # nothing written
    with pytest.raises(UnsupportedProtocol, match=feature):
        upkeep_table(warehouse, "Account", UpkeepConfig())  # nor compacted / vacuumed

    check = check_table_protocol({"Account": warehouse.table("Account"), "Account__history": None})
    assert not check.passed and feature in check.description and check.metadata["tables_refused"].value == 1


WRITES = {
    "append": lambda w, t: w.append(
        "R", rows([B], "x"), read=t, partition_by=["_sf_bucket"], key="k", state={}, txns={}
    ),
    "overwrite": lambda w, t: w.overwrite(
        "R", rows([B], "x").to_reader(), read=t, partition_by=["_sf_bucket"], key="k", state={}, txns={}
    ),
    "update_columns": lambda w, t: w.update_columns(
        "R",
        rows([A], "x"),
        read=t,
        key_column="Id",
        columns=["Name"],
        partition_column="_sf_bucket",
        partition_values=[BUCKET],
        key="k",
        state={},
        txns={},
    ),
    "insert_missing": lambda w, t: w.insert_missing("R", rows([B], "x"), keys=["Id"], key="k", state={}),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_writer_of_the_warehouse_refuses_such_a_table(tmp_path, write):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    write_deltalake(str(tmp_path / "R"), rows([A], "first"), partition_by=["_sf_bucket"])  # made before its CDF was on
    DeltaTable(str(tmp_path / "R")).alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True)
    table = warehouse.table("R")
    with pytest.raises(UnsupportedProtocol, match="rowTracking"):
        WRITES[write](warehouse, table)
    assert warehouse.table("R").version() == 1


@pytest.mark.parametrize(
    ("protocol", "problems"),
    [
        (Protocol(1, 2, (), (), False), []),
        (Protocol(1, 4, (), (), False), []),
        (Protocol(1, 7, (), ("appendOnly", "changeDataFeed", "checkConstraints", "invariants"), False), []),
        (Protocol(2, 5, (), (), False), ["minReaderVersion 2", "minWriterVersion 5 (column mapping)"]),
        (Protocol(1, 6, (), (), False), ["minWriterVersion 6 (identity columns)"]),
        (Protocol(3, 7, ("deletionVectors",), ("deletionVectors",), False), ["reader features deletionVectors"]),
        (Protocol(1, 7, (), ("changeDataFeed", "inCommitTimestamp"), False), ["writer features inCommitTimestamp"]),
        (Protocol(1, 2, (), (), True), [f"{APPEND_ONLY}=true"]),
    ],
)
def test_the_allow_list(protocol: Protocol, problems: list[str]):
    assert protocol.problems() == problems


def test_the_platforms_own_reads_refuse_a_table_whose_files_alone_are_not_its_rows(tmp_path):
    """Its Parquet reads (read_table, the changefeed's) apply no deletion vector: they say so instead of reading
    rows a deletion vector removed."""
    warehouse = DeltaWarehouse(root=str(tmp_path))
    table = made(warehouse, "Account")
    assert read_table(table)["Id"].to_pylist() == [A]
    DeltaTable(str(tmp_path / "Account")).alter.add_feature(
        TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
    )
    with pytest.raises(UnsupportedProtocol, match=r"now requires reader features deletionVectors.*reading its files"):
        read_table(warehouse.table("Account"))
