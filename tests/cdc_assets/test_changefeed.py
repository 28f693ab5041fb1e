"""The replica changefeed on real Delta tables written through the platform's own write paths (DeltaWarehouse:
append on create, merge, overwrite as a resync does), without an org: netting, modes, formats, crash and restart
(cdc_assets/changefeed.py). The end-to-end workload against the emulator is in test_changefeed_e2e.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest
import yaml

from cdc_assets.changefeed import export_changefeed
from cdc_assets.changefeed_config import ChangefeedConfig, MODES
from cdc_assets.changefeed_reader import ChangefeedReader, replay
from cdc_assets.config import load_config
from cdc_assets.faults import InjectedFault
from resources.changefeed_store import RESOLVED
from resources.delta import CHANGE_FEED, DeltaWarehouse, table_configuration, read_table

SCHEMA = json.loads((Path(__file__).parents[2] / "cdc_assets" / "changefeed_debezium.schema.json").read_text())
TS = pa.timestamp("us", tz="UTC")
T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
ARROW = pa.schema([("Id", pa.string()), ("Name", pa.string()), ("Amount", pa.float64()), ("Born", pa.date32()),
                   ("_sf_deleted", pa.bool_()), ("_sf_commit_ts", TS), ("_sf_replay_id", pa.int64()),
                   ("_sf_source", pa.string()), ("_sf_synced_at", TS), ("_sf_bucket", pa.string())])


def rows(*records: tuple, synced: int = 0, source: str = "cdc") -> pa.Table:
    """(Id, Name, Amount, deleted, commit second) records as replica rows; `synced` moves the bookkeeping time."""
    return pa.Table.from_pylist([{
        "Id": i, "Name": n, "Amount": a, "Born": T0.date() if a else None, "_sf_deleted": d,
        "_sf_commit_ts": T0 + timedelta(seconds=s), "_sf_replay_id": 100 + s, "_sf_source": source,
        "_sf_synced_at": T0 + timedelta(days=1, seconds=synced), "_sf_bucket": i[:3]} for i, n, a, d, s in records],
        schema=ARROW)


class Replica:
    """A replica table written the way apply.py (merge) and sync.py (overwrite) write it."""

    def __init__(self, root: Path):
        self.warehouse = DeltaWarehouse(root=str(root))

    def create(self, data: pa.Table) -> None:
        self.warehouse.append("Account", data, read=None, partition_by=["_sf_bucket"], key="k", state={}, txns={})

    def merge(self, data: pa.Table) -> None:
        self.warehouse.upsert("Account", data, read=self.warehouse.table("Account"), key_column="Id",
                              partition_column="_sf_bucket", partition_values=data["_sf_bucket"].to_pylist(),
                              key="k", state={}, txns={})

    def resync(self, data: pa.Table) -> None:
        self.warehouse.overwrite("Account", pa.RecordBatchReader.from_batches(ARROW, data.to_batches()),
                                 read=self.warehouse.table("Account"), partition_by=["_sf_bucket"], key="k",
                                 state={}, txns={})

    def live(self) -> dict[str, dict]:
        """The replica's live rows, data columns only, as the feed renders values."""
        table = read_table(self.warehouse.table("Account"))
        out = {}
        for r in table.to_pylist():
            if not r["_sf_deleted"]:
                out[r["Id"]] = {"Name": r["Name"], "Amount": r["Amount"],
                                "Born": r["Born"].isoformat() if r["Born"] else None}
        return out


def feed(tmp_path: Path, mode: str = "NEW_AND_OLD_IMAGES", fmt: str = "json", **kw) -> ChangefeedConfig:
    return ChangefeedConfig(uri=str(tmp_path / f"feed-{mode}-{fmt}"), mode=mode, format=fmt, **kw)


def records(config: ChangefeedConfig) -> list[dict]:
    return [r for _, r in ChangefeedReader(config.object_uri("Account")).read()]


def changes(config: ChangefeedConfig) -> list[dict]:
    return [r for r in records(config) if "resolved" not in r]


def workload(replica: Replica) -> None:
    """Creates, an update, a bookkeeping-only rewrite, a soft delete, an undelete, a resync."""
    replica.merge(rows(("001A", "Acme 2", 10.0, False, 10), ("001C", "Cyberdyne", None, False, 11)))
    replica.merge(rows(("001A", "Acme 2", 10.0, False, 10), synced=50, source="reconcile"))  # nothing changed
    replica.merge(rows(("001B", "Globex", 2.0, True, 12)))  # soft delete
    replica.merge(rows(("001B", "Globex", 3.0, False, 13)))  # undelete (with a value changed meanwhile)
    # A resync: one value differs, one record gone from the org (marked deleted), the rest identical.
    replica.resync(rows(("001A", "Acme\u20283", 10.0, False, 14), ("001B", "Globex", 3.0, False, 13),
                        ("001C", "Cyberdyne", None, True, 14), synced=99, source="snapshot"))


@pytest.fixture
def replica(tmp_path) -> Replica:
    replica = Replica(tmp_path / "warehouse")
    replica.create(rows(("001A", "Acme", 1.0, False, 1), ("001B", "Globex", 2.0, False, 2)))
    return replica


def test_replicas_are_created_with_a_change_data_feed_and_old_ones_get_it_once(tmp_path, replica):
    assert replica.warehouse.table("Account").metadata().configuration[CHANGE_FEED] == "true"
    from deltalake import write_deltalake
    write_deltalake(str(tmp_path / "warehouse" / "Old"), rows(("001X", "x", 1.0, False, 1)))
    old = DeltaWarehouse(root=str(tmp_path / "warehouse"))
    assert old.enable_change_feed("Old").metadata().configuration[CHANGE_FEED] == "true"
    version = old.table("Old").version()
    assert old.enable_change_feed("Old").version() == version  # set once
    assert table_configuration("_change_events") is None  # only replicas keep a feed


def test_feed_nets_each_version_and_replays_to_the_replica(tmp_path, replica):
    config = feed(tmp_path, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    got = [(r["ts"][0], r["key"][0], "erase" if "erase" in r else "update") for r in changes(config)]
    assert got == [
        (0, "001A", "update"), (0, "001B", "update"),  # initial scan
        (1, "001A", "update"), (1, "001C", "update"),  # version 2 (bookkeeping only) emits nothing
        (3, "001B", "erase"), (4, "001B", "update"),  # soft delete, undelete
        (5, "001A", "update"), (5, "001C", "erase"),  # the resync: only the difference it made
    ]
    updated = [r for r in changes(config) if r["ts"][0] == 5 and "update" in r][0]
    assert updated["oldImage"]["Name"] == "Acme 2" and updated["newImage"]["Name"] == "Acme\u20283"
    undeleted = [r for r in changes(config) if r["ts"][0] == 4][0]
    assert "oldImage" not in undeleted and undeleted["newImage"]["Amount"] == 3.0
    assert replay(records(config)) == replica.live()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", ["json", "debezium_json"])
def test_each_mode_and_format(tmp_path, replica, mode, fmt):
    config = feed(tmp_path, mode, fmt, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    state = replay(records(config))
    assert set(state) == set(replica.live())  # every mode gives the key set
    if mode in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES", "UPDATES"):
        assert state == replica.live()  # these carry what a copy needs
    if fmt == "debezium_json":
        validator = jsonschema.Draft202012Validator(SCHEMA)
        for record in records(config):
            validator.validate(record)
        ops = [r["payload"]["op"] for r in changes(config)]
        assert ops == ["r", "r", "u", "c", "d", "c", "u", "d"]
        delete = [r for r in changes(config) if r["payload"]["op"] == "d"][0]["payload"]
        assert delete["source"]["ts_ms"] == int((T0 + timedelta(seconds=12)).timestamp() * 1000)
        assert delete["source"]["replay_id"] == 112
    if mode == "UPDATES" and fmt == "json":
        update = [r for r in changes(config) if r["ts"][0] == 1 and r["key"] == ["001A"]][0]
        assert update["update"] == {"Name": "Acme 2", "Amount": 10.0}  # the changed columns only


def test_envelope_schema_rejects_a_malformed_record():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    bad = {"key": {"Id": "001A"}, "payload": {"op": "d", "before": None, "after": {"Id": "001A"}, "ts_ms": 1,
                                              "source": {}, "transaction": None}}
    assert list(validator.iter_errors(bad))


def test_heartbeat_after_every_export_even_when_nothing_changed(tmp_path, replica):
    config = feed(tmp_path)
    export_changefeed(replica.warehouse, "Account", config, now=T0 + timedelta(days=5))
    reader = ChangefeedReader(config.object_uri("Account"))
    first = reader.resolved()
    files = reader.store.files()
    export_changefeed(replica.warehouse, "Account", config, now=T0 + timedelta(days=6))
    assert reader.store.files() == files  # nothing new: no file
    assert reader.resolved()[0] == first[0] == 0 and reader.resolved()[1] > first[1]
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    export_changefeed(replica.warehouse, "Account", config)
    assert reader.resolved()[0] == 1
    assert records(config)[-1] == {"resolved": [1, records(config)[-2]["ts"][1]]}  # a file ends resolved


def test_files_are_split_by_max_versions_and_read_in_order(tmp_path, replica):
    config = feed(tmp_path, max_versions_per_file=2)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    result = export_changefeed(replica.warehouse, "Account", config)
    assert result.files == ["00000000000000000001-00000000000000000002.jsonl",
                            "00000000000000000003-00000000000000000004.jsonl",
                            "00000000000000000005-00000000000000000005.jsonl"]
    stamps = [r["ts"] if "ts" in r else r["resolved"] for r in records(config)]
    assert stamps == sorted(stamps)


def test_consumer_restart_mid_feed_reads_every_record_once(tmp_path, replica):
    config = feed(tmp_path, max_versions_per_file=2, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    everything = records(config)
    reader = ChangefeedReader(config.object_uri("Account"))
    consumed, position = [], None
    for stop in (3, 4, 1, 100):  # a consumer that saves its position and restarts
        for n, (pos, record) in enumerate(reader.read(position)):
            if n == stop:
                break
            consumed.append(record)
            position = pos
    assert consumed == everything
    assert list(reader.read(position)) == []


@pytest.mark.parametrize("point", ["changefeed.before_rename", "changefeed.after_rename"])
def test_exporter_crash_then_rerun_writes_identical_files(tmp_path, replica, monkeypatch, point):
    clean, crashed = feed(tmp_path / "clean", initial_scan=True), feed(tmp_path / "crashed", initial_scan=True)
    export_changefeed(replica.warehouse, "Account", clean)
    export_changefeed(replica.warehouse, "Account", crashed)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", clean)
    monkeypatch.setenv("CDC_FAULT_POINT", point)
    with pytest.raises(InjectedFault):
        export_changefeed(replica.warehouse, "Account", crashed)
    folder = Path(crashed.object_uri("Account"))
    assert any(p.name.startswith("_") for p in folder.iterdir()) == (point == "changefeed.before_rename")
    monkeypatch.delenv("CDC_FAULT_POINT")
    export_changefeed(replica.warehouse, "Account", crashed)

    def files(config):
        return {p.name: p.read_bytes() for p in Path(config.object_uri("Account")).iterdir() if p.name != RESOLVED}

    assert files(crashed) == files(clean)
    assert len(files(clean)) == 2


def test_config_section_defaults_overrides_and_errors(tmp_path):
    path = tmp_path / "replication.yaml"
    path.write_text(yaml.safe_dump({
        "options": {"changefeed": {"uri": "feeds", "mode": "NEW_IMAGE", "initial_scan": True}},
        "objects": [{"name": "Account"}, {"name": "Contact", "changefeed": {"mode": "keys_only",
                                                                           "format": "debezium_json"}},
                    {"name": "Case", "changefeed": False}]}))
    objects = {o.name: o.changefeed for o in load_config(path).objects}
    assert objects["Account"] == ChangefeedConfig(uri=str(tmp_path / "feeds"), mode="NEW_IMAGE", initial_scan=True)
    assert objects["Contact"].mode == "KEYS_ONLY" and objects["Contact"].format == "debezium_json"
    assert objects["Case"] is None
    path.write_text(yaml.safe_dump({"objects": [{"name": "Account", "changefeed": {"mode": "ALL"}}]}))
    with pytest.raises(ValueError, match=r"objects\[0\]\.changefeed\.mode: Input should be .KEYS_ONLY."):
        load_config(path)
    path.write_text(yaml.safe_dump({"objects": [{"name": "Account"}]}))
    assert load_config(path).objects[0].changefeed is None


def test_hard_delete_is_an_erase_with_the_old_image(tmp_path, replica):
    config = feed(tmp_path, fmt="debezium_json")
    export_changefeed(replica.warehouse, "Account", config)
    replica.warehouse.table("Account").delete("Id = '001B'")  # a `hard` delete mode removes the row
    export_changefeed(replica.warehouse, "Account", config)
    (erase,) = changes(config)
    assert erase["payload"]["op"] == "d" and erase["payload"]["before"]["Name"] == "Globex"
    assert erase["payload"]["source"]["replay_id"] == 102  # the row's last position: the delete carries none
    assert replay(records(config), {"001A": {}, "001B": {}}) == {"001A": {}}


def test_a_replica_created_without_a_feed_gets_one_and_the_feed_starts_there(tmp_path):
    from deltalake import write_deltalake
    warehouse = DeltaWarehouse(root=str(tmp_path / "warehouse"))
    write_deltalake(warehouse.uri("Account"), rows(("001A", "Acme", 1.0, False, 1)), partition_by=["_sf_bucket"])
    replica = Replica(tmp_path / "warehouse")
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 2)))  # version 1: before the feed, no CDF
    config = feed(tmp_path, initial_scan=True)
    result = export_changefeed(warehouse, "Account", config)
    assert result.position == 2 and warehouse.table("Account").metadata().configuration[CHANGE_FEED] == "true"
    replica.merge(rows(("001A", "Acme 3", 1.0, False, 3), ("001B", "Globex", 2.0, False, 3)))
    export_changefeed(warehouse, "Account", config)
    assert [r["ts"][0] for r in changes(config)] == [2, 3, 3]
    assert replay(records(config)) == replica.live()


KILLED_EXPORT = """
import sys
from cdc_assets.changefeed import export_changefeed
from cdc_assets.changefeed_config import ChangefeedConfig
from resources.delta import DeltaWarehouse
export_changefeed(DeltaWarehouse(root=sys.argv[1]), "Account", ChangefeedConfig(uri=sys.argv[2], initial_scan=True))
"""


@pytest.mark.parametrize("point", ["changefeed.before_rename", "changefeed.after_rename"])
def test_exporter_killed_then_rerun_writes_identical_files(tmp_path, replica, point):
    """A real crash (SIGKILL: no cleanup) of an export process, then a re-run."""
    import os
    import signal
    import subprocess
    import sys
    clean, crashed = feed(tmp_path / "clean", initial_scan=True), feed(tmp_path / "crashed", initial_scan=True)
    warehouse = str(tmp_path / "warehouse")

    def run(config, env=None):
        return subprocess.run([sys.executable, "-c", KILLED_EXPORT, warehouse, config.uri], capture_output=True,
                              cwd=Path(__file__).parents[2], env={**os.environ, **(env or {})}, timeout=120)

    assert run(clean).returncode == 0 and run(crashed).returncode == 0
    workload(replica)
    assert run(clean).returncode == 0
    killed = run(crashed, {"CDC_FAULT_POINT": point, "CDC_FAULT_ACTION": "kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert run(crashed).returncode == 0

    def files(config):
        return {p.name: p.read_bytes() for p in Path(config.object_uri("Account")).iterdir() if p.name != RESOLVED}

    assert files(crashed) == files(clean) and len(files(clean)) == 2


def test_a_recreated_replica_stops_the_feed_with_what_to_do(tmp_path, replica):
    import shutil
    config = feed(tmp_path)
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    export_changefeed(replica.warehouse, "Account", config)
    shutil.rmtree(tmp_path / "warehouse" / "Account")
    replica.create(rows(("001A", "Acme", 1.0, False, 1)))  # version 0 again: not the feed's version 0
    with pytest.raises(RuntimeError, match="the table was recreated"):
        export_changefeed(replica.warehouse, "Account", config)


def test_compaction_and_property_commits_emit_nothing_but_advance_the_feed(tmp_path, replica):
    config = feed(tmp_path)
    replica.merge(rows(("001C", "Cyberdyne", None, False, 3)))
    replica.merge(rows(("001C", "Cyberdyne 2", None, False, 4)))
    export_changefeed(replica.warehouse, "Account", config)
    assert replica.warehouse.table("Account").optimize.compact()["numFilesRemoved"] > 0
    replica.warehouse.table("Account").alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    result = export_changefeed(replica.warehouse, "Account", config)
    assert result.records == {} and result.position == replica.warehouse.table("Account").version() == 4
