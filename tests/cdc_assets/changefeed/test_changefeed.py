"""The replica changefeed on real Delta tables written through the platform's own write paths (DeltaWarehouse:
append on create, merge, overwrite as a resync does), without an org: netting, modes, formats, crash and restart
(cdc_assets/changefeed/export.py). The end-to-end workload against the emulator is in test_changefeed_e2e.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest
import yaml
from deltalake import Schema
from settings import REPO

from cdc_assets.changefeed.export import RecreatedReplicaError, export_changefeed
from replication.changefeed import DEBEZIUM_SCHEMA
from replication.changefeed.config import MODES, ChangefeedConfig
from replication.changefeed.reader import ChangefeedReader, replay
from replication.changefeed.rows import net_changes
from replication.config import load_config
from replication.state import REPLICA_STATE
from resources.changefeed_store import IDENTITY, RESOLVED
from resources.delta import CHANGE_FEED, DeltaWarehouse, read_table, table_configuration
from shared.faults import InjectedFault

SCHEMA = json.loads(DEBEZIUM_SCHEMA.read_text())
TS = pa.timestamp("us", tz="UTC")
T0 = datetime(2025, 3, 1, tzinfo=UTC)
ARROW = pa.schema(
    [
        ("Id", pa.string()),
        ("Name", pa.string()),
        ("Amount", pa.float64()),
        ("Born", pa.date32()),
        ("_sf_deleted", pa.bool_()),
        ("_sf_commit_ts", TS),
        ("_sf_replay_id", pa.int64()),
        ("_sf_source", pa.string()),
        ("_sf_synced_at", TS),
        ("_sf_bucket", pa.string()),
    ]
)


def rows(*records: tuple, synced: int = 0, source: str = "cdc") -> pa.Table:
    """(Id, Name, Amount, deleted, commit second) records as replica rows; `synced` moves the bookkeeping time."""
    return pa.Table.from_pylist(
        [
            {
                "Id": i,
                "Name": n,
                "Amount": a,
                "Born": T0.date() if a else None,
                "_sf_deleted": d,
                "_sf_commit_ts": T0 + timedelta(seconds=s),
                "_sf_replay_id": 100 + s,
                "_sf_source": source,
                "_sf_synced_at": T0 + timedelta(days=1, seconds=synced),
                "_sf_bucket": i[:3],
            }
            for i, n, a, d, s in records
        ],
        schema=ARROW,
    )


class Replica:
    """A replica table written the way apply.py (merge) and refetch.py (overwrite) write it, each commit with its
    replica state. Without change_events no row has a transaction, so a change's ts step is its commit's
    `applied_through` (replication/changefeed/clock.py): here the version, unless `applied` says otherwise."""

    def __init__(self, root: Path, name: str = "Account"):
        self.warehouse, self.name = DeltaWarehouse(root=str(root)), name

    def _state(self, read, applied: int | None, held: dict | None = None) -> dict:
        version = read.version() + 1 if read is not None else 0
        return {"applied_through": version if applied is None else applied, "held": held}

    def create(self, data: pa.Table, applied: int | None = None) -> None:
        self.warehouse.append(
            self.name,
            data,
            read=None,
            partition_by=["_sf_bucket"],
            key=REPLICA_STATE,
            state=self._state(None, applied),
            txns={},
        )

    def merge(self, data: pa.Table, applied: int | None = None, held: dict | None = None) -> None:
        read = self.warehouse.table(self.name)
        self.warehouse.upsert(
            self.name,
            data,
            read=read,
            key_column="Id",
            partition_column="_sf_bucket",
            partition_values=data["_sf_bucket"].to_pylist(),
            key=REPLICA_STATE,
            state=self._state(read, applied, held),
            txns={},
        )

    def resync(self, data: pa.Table, applied: int | None = None) -> None:
        read = self.warehouse.table(self.name)
        self.warehouse.overwrite(
            self.name,
            pa.RecordBatchReader.from_batches(data.schema, data.to_batches()),
            read=read,
            partition_by=["_sf_bucket"],
            key=REPLICA_STATE,
            state=self._state(read, applied),
            txns={},
        )

    def live(self) -> dict[str, dict]:
        """The replica's live rows, data columns only, as the feed renders values."""
        table = read_table(self.warehouse.table(self.name))
        out = {}
        for r in table.to_pylist():
            if not r["_sf_deleted"]:
                out[r["Id"]] = {
                    "Name": r["Name"],
                    "Amount": r["Amount"],
                    "Born": r["Born"].isoformat() if r["Born"] else None,
                }
        return out


def feed(tmp_path: Path, mode: str = "NEW_AND_OLD_IMAGES", fmt: str = "json", **kw) -> ChangefeedConfig:
    return ChangefeedConfig(uri=str(tmp_path / f"feed-{mode}-{fmt}"), mode=mode, format=fmt, **kw)


def records(config: ChangefeedConfig) -> list[dict]:
    return [r for _, r in ChangefeedReader(config.object_uri("Account")).read()]


def changes(config: ChangefeedConfig) -> list[dict]:
    """Change records (not resolved lines, not Debezium tombstones)."""
    return [r for r in records(config) if "resolved" not in r and r.get("value", True) is not None]


def workload(replica: Replica) -> None:
    """Creates, an update, a bookkeeping-only rewrite, a soft delete, an undelete, a resync."""
    replica.merge(rows(("001A", "Acme 2", 10.0, False, 10), ("001C", "Cyberdyne", None, False, 11)))
    replica.merge(rows(("001A", "Acme 2", 10.0, False, 10), synced=50, source="reconcile"))  # nothing changed
    replica.merge(rows(("001B", "Globex", 2.0, True, 12)))  # soft delete
    replica.merge(rows(("001B", "Globex", 3.0, False, 13)))  # undelete (with a value changed meanwhile)
    # A resync: one value differs, one record gone from the org (marked deleted), the rest identical.
    replica.resync(
        rows(
            ("001A", "Acme\u20283", 10.0, False, 14),
            ("001B", "Globex", 3.0, False, 13),
            ("001C", "Cyberdyne", None, True, 14),
            synced=99,
            source="snapshot",
        )
    )


@pytest.fixture
def replica(tmp_path) -> Replica:
    replica = Replica(tmp_path / "warehouse")
    replica.create(rows(("001A", "Acme", 1.0, False, 1), ("001B", "Globex", 2.0, False, 2)))
    return replica


def test_replicas_are_created_with_a_change_data_feed(replica):
    assert replica.warehouse.table("Account").metadata().configuration[CHANGE_FEED] == "true"
    assert table_configuration("_change_events") is None  # only replicas keep a feed


def test_feed_nets_each_version_and_replays_to_the_replica(tmp_path, replica):
    config = feed(tmp_path, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    got = [(r["ts"][0], r["key"][0], "erase" if "erase" in r else "update") for r in changes(config)]
    assert got == [
        (0, "001A", "update"),
        (0, "001B", "update"),  # initial scan
        (1, "001A", "update"),
        (1, "001C", "update"),  # version 2 (bookkeeping only) emits nothing
        (3, "001B", "erase"),
        (4, "001B", "update"),  # soft delete, undelete
        (5, "001A", "update"),
        (5, "001C", "erase"),  # the resync: only the difference it made
    ]
    updated = next(r for r in changes(config) if r["ts"][0] == 5 and "update" in r)
    assert updated["oldImage"]["Name"] == "Acme 2" and updated["newImage"]["Name"] == "Acme\u20283"
    undeleted = next(r for r in changes(config) if r["ts"][0] == 4)
    assert "oldImage" not in undeleted and undeleted["newImage"]["Amount"] == 3.0
    assert replay(records(config)) == replica.live()


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_of_ydb_json(tmp_path, replica, mode):
    config = feed(tmp_path, mode, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    state = replay(records(config))
    assert set(state) == set(replica.live())  # every mode gives the key set
    if mode in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES", "UPDATES"):
        assert state == replica.live()  # these carry what a copy needs
    if mode == "UPDATES":
        update = next(r for r in changes(config) if r["ts"][0] == 1 and r["key"] == ["001A"])
        assert update["update"] == {"Name": "Acme 2", "Amount": 10.0}  # the changed columns only


def test_debezium_json_is_debeziums_key_and_value_envelope(tmp_path, replica):
    """Each line is one Kafka record as Debezium's JsonConverter writes it (key, value), the
    value Debezium's envelope with whole before and after rows, `source` with `db` and the snapshot's last record
    marked "last", a tombstone after each delete, and no resolved lines in the record stream."""
    config = feed(tmp_path, fmt="debezium_json", initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    export_changefeed(replica.warehouse, "Account", config)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for record in records(config):
        validator.validate(record)
        assert set(record) == {"key", "value"}  # no resolved line, no other kind of record
    values = [r["value"] for r in changes(config)]
    assert [v["op"] for v in values] == ["r", "r", "u", "c", "d", "c", "u", "d"]
    assert [v["source"]["snapshot"] for v in values[:3]] == ["true", "last", "false"]
    assert {v["source"]["db"] for v in values} == {"salesforce"}
    update = values[2]
    assert update["before"] == {"Id": "001A", "Name": "Acme", "Amount": 1.0, "Born": "2025-03-01"}
    assert update["after"] == {"Id": "001A", "Name": "Acme 2", "Amount": 10.0, "Born": "2025-03-01"}  # whole row
    delete = values[4]
    assert delete["before"]["Name"] == "Globex" and delete["after"] is None
    assert delete["source"]["ts_ms"] == int((T0 + timedelta(seconds=12)).timestamp() * 1000)
    assert delete["source"]["replay_id"] == 112
    lines = records(config)
    tombstones = [i for i, r in enumerate(lines) if r["value"] is None]
    assert [lines[i - 1]["value"]["op"] for i in tombstones] == ["d", "d"]  # each right after its delete
    assert all(lines[i]["key"] == lines[i - 1]["key"] for i in tombstones)
    assert replay(lines) == replica.live()


@pytest.mark.parametrize("mode", [m for m in MODES if m != "NEW_AND_OLD_IMAGES"])
def test_debezium_json_refuses_modes_without_both_images(mode):
    with pytest.raises(ValueError, match="debezium_json needs mode NEW_AND_OLD_IMAGES"):
        ChangefeedConfig(uri="x", mode=mode, format="debezium_json")


def test_envelope_schema_rejects_a_malformed_record():
    validator = jsonschema.Draft202012Validator(SCHEMA)
    source = {
        "version": "2",
        "connector": "salesforce-delta",
        "name": "salesforce",
        "ts_ms": 1,
        "snapshot": "false",
        "db": "salesforce",
        "sequence": "[1,0]",
        "table": "Account",
        "txId": None,
        "replay_id": None,
        "commit_number": None,
        "sequence_number": None,
        "origin": "cdc",
        "commit_ts": None,
        "delta_version": 1,
        "delta_commit_ms": 1,
    }
    good = {
        "key": {"Id": "001A"},
        "value": {
            "before": {"Id": "001A"},
            "after": None,
            "source": source,
            "op": "d",
            "ts_ms": 1,
            "transaction": None,
        },
    }
    assert not list(validator.iter_errors(good))
    for bad in (
        {**good, "value": {**good["value"], "after": {"Id": "001A"}}},  # a delete with an after image
        {**good, "value": {**good["value"], "op": "u", "before": None, "after": {"Id": "001A"}}},
        {"key": {"Id": "001A"}, "payload": good["value"]},  # one object holding the envelope: not a Kafka record
        {"resolved": [1, 0]},
    ):
        assert list(validator.iter_errors(bad)), bad


def test_heartbeat_after_every_export_even_when_nothing_changed(tmp_path, replica):
    config = feed(tmp_path)
    export_changefeed(replica.warehouse, "Account", config, now=T0 + timedelta(days=5))
    reader = ChangefeedReader(config.object_uri("Account"))
    files = reader.store.files()
    assert reader.resolved() == [0, 0] and reader.version() == 0
    export_changefeed(replica.warehouse, "Account", config, now=T0 + timedelta(days=6))
    assert reader.store.files() == files  # nothing new: no file
    assert reader.store.read_resolved()["at"] == (T0 + timedelta(days=6)).isoformat()
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    export_changefeed(replica.warehouse, "Account", config)
    assert reader.resolved() == [1, 0] and reader.version() == 1
    assert records(config)[-1] == {"resolved": [1, 0]}  # a YDB JSON file ends resolved


def test_files_are_split_by_max_versions_and_read_in_order(tmp_path, replica):
    config = feed(tmp_path, max_versions_per_file=2)
    export_changefeed(replica.warehouse, "Account", config)
    workload(replica)
    result = export_changefeed(replica.warehouse, "Account", config)
    assert result.files == [
        "00000000000000000001-00000000000000000002-00000000000000000002.jsonl",
        "00000000000000000003-00000000000000000004-00000000000000000004.jsonl",
        "00000000000000000005-00000000000000000005-00000000000000000005.jsonl",
    ]
    stamps = [r["ts"] if "ts" in r else r["resolved"] for r in records(config)]
    assert [s[0] for s in stamps] == sorted(s[0] for s in stamps)


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
        return {
            p.name: p.read_bytes()
            for p in Path(config.object_uri("Account")).iterdir()
            if p.name not in (RESOLVED, IDENTITY)
        }

    assert files(crashed) == files(clean)
    assert len(files(clean)) == 2


def test_config_section_defaults_overrides_and_errors(tmp_path):
    path = tmp_path / "replication.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "options": {"changefeed": {"uri": "feeds", "mode": "NEW_IMAGE", "initial_scan": True}},
                "objects": [
                    {"name": "Account"},
                    {"name": "Contact", "changefeed": {"mode": "keys_only", "format": "debezium_json"}},
                    {"name": "Case", "changefeed": False},
                ],
            }
        )
    )
    with pytest.raises(ValueError, match=r"objects\[1\].*debezium_json needs mode NEW_AND_OLD_IMAGES"):
        load_config(path)  # Contact's own section over the default would be KEYS_ONLY Debezium
    path.write_text(path.read_text().replace("keys_only", "new_and_old_images"))
    objects = {o.name: o.changefeed for o in load_config(path).objects}
    assert objects["Account"] == ChangefeedConfig(uri=str(tmp_path / "feeds"), mode="NEW_IMAGE", initial_scan=True)
    assert objects["Contact"].mode == "NEW_AND_OLD_IMAGES" and objects["Contact"].format == "debezium_json"
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
    (erase,) = [r["value"] for r in changes(config)]
    assert erase["op"] == "d" and erase["before"]["Name"] == "Globex"
    assert erase["source"]["replay_id"] == 102  # the row's last position: the delete carries none
    assert replay(records(config), {"001A": {}, "001B": {}}) == {"001A": {}}


KILLED_EXPORT = """
import sys
from cdc_assets.changefeed.export import export_changefeed
from replication.changefeed.config import ChangefeedConfig
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
        return subprocess.run(
            [sys.executable, "-c", KILLED_EXPORT, warehouse, config.uri],
            capture_output=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            timeout=120,
        )

    assert run(clean).returncode == 0 and run(crashed).returncode == 0
    workload(replica)
    assert run(clean).returncode == 0
    killed = run(crashed, {"CDC_FAULT_POINT": point, "CDC_FAULT_ACTION": "kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert run(crashed).returncode == 0

    def files(config):
        return {
            p.name: p.read_bytes()
            for p in Path(config.object_uri("Account")).iterdir()
            if p.name not in (RESOLVED, IDENTITY)
        }

    assert files(crashed) == files(clean) and len(files(clean)) == 2


def test_a_recreated_replica_stops_the_feed_with_what_to_do(tmp_path, replica):
    import shutil

    config = feed(tmp_path)
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    export_changefeed(replica.warehouse, "Account", config)
    shutil.rmtree(tmp_path / "warehouse" / "Account")
    replica.create(rows(("001A", "Acme", 1.0, False, 1)))  # version 0 again: not the feed's version 0
    with pytest.raises(RecreatedReplicaError, match="deleted and re-made"):
        export_changefeed(replica.warehouse, "Account", config)


def test_a_recreated_replica_whose_versions_caught_up_still_stops_the_feed(tmp_path, replica):
    """A replica deleted and re-made, then written until its version passed the feed's position: a version
    comparison cannot tell it from the table the feed follows. The feed records the Delta table id, so it stops
    and says to re-export with an initial scan; nothing is written."""
    import shutil

    config = feed(tmp_path)
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    export_changefeed(replica.warehouse, "Account", config)  # position: version 1
    files = ChangefeedReader(config.object_uri("Account")).store.files()
    shutil.rmtree(tmp_path / "warehouse" / "Account")
    replica.create(rows(("001Z", "Zeta", 1.0, False, 1)))
    for n in range(3):  # versions 1..3: past the feed's position
        replica.merge(rows(("001Z", f"Zeta {n}", 1.0, False, 2 + n)))
    with pytest.raises(RecreatedReplicaError, match=r"Re-export with an initial scan.*initial_scan: true"):
        export_changefeed(replica.warehouse, "Account", config)
    assert ChangefeedReader(config.object_uri("Account")).store.files() == files


def test_a_resync_overwrite_keeps_the_table_and_the_feed(tmp_path, replica):
    """The table id survives an overwrite (a resync rewrites the table, it does not re-make it)."""
    config = feed(tmp_path)
    export_changefeed(replica.warehouse, "Account", config)
    identity = json.loads((Path(config.object_uri("Account")) / IDENTITY).read_text())
    replica.resync(rows(("001A", "Acme 9", 1.0, False, 9)))
    export_changefeed(replica.warehouse, "Account", config)
    assert identity["table_id"] == replica.warehouse.table("Account").metadata().id
    assert replay(records(config), {"001A": {}, "001B": {}}) == {
        "001A": {"Name": "Acme 9", "Amount": 1.0, "Born": "2025-03-01"}
    }


def test_a_feed_whose_table_record_is_gone_stops_and_writes_nothing(tmp_path, replica):
    """`table.json` is written before a feed's first file: files without it cannot say which table they follow,
    so the export stops rather than guess that the replica is that table."""
    config = feed(tmp_path)
    export_changefeed(replica.warehouse, "Account", config)
    (Path(config.object_uri("Account")) / IDENTITY).unlink()
    files = ChangefeedReader(config.object_uri("Account")).store.files()
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)))
    with pytest.raises(RecreatedReplicaError, match=r"no table\.json.*initial_scan: true"):
        export_changefeed(replica.warehouse, "Account", config)
    assert ChangefeedReader(config.object_uri("Account")).store.files() == files
    assert not (Path(config.object_uri("Account")) / IDENTITY).exists()


def test_compaction_and_property_commits_emit_nothing_but_advance_the_feed(tmp_path, replica):
    config = feed(tmp_path)
    replica.merge(rows(("001C", "Cyberdyne", None, False, 3)))
    replica.merge(rows(("001C", "Cyberdyne 2", None, False, 4)))
    export_changefeed(replica.warehouse, "Account", config)
    assert replica.warehouse.table("Account").optimize.compact()["numFilesRemoved"] > 0
    replica.warehouse.table("Account").alter.set_table_properties({"delta.logRetentionDuration": "interval 30 days"})
    result = export_changefeed(replica.warehouse, "Account", config)
    assert result.records == {} and result.position == replica.warehouse.table("Account").version() == 4


def events(*rows: tuple) -> pa.Table:
    """change_events rows (entity, record Id, commit number, transaction key, ingest sequence): the columns the
    feeds' clock reads."""
    return pa.Table.from_pylist(
        [
            {"entity": e, "record_id": i, "commit_number": n, "transaction_key": k, "_ingest_seq": s}
            for e, i, n, k, s in rows
        ],
        schema=pa.schema(
            [
                ("entity", pa.string()),
                ("record_id", pa.string()),
                ("commit_number", pa.int64()),
                ("transaction_key", pa.string()),
                ("_ingest_seq", pa.int64()),
            ]
        ),
    )


def applied(*records: tuple) -> pa.Table:
    """(Id, Name, commit number) rows as a replica holds them after applying those transactions."""
    data = rows(*[(i, n, 1.0, False, c % 100) for i, n, c in records])
    return data.append_column("_sf_commit_number", pa.array([c for _, _, c in records], pa.int64()))


def test_feeds_of_two_objects_merge_in_commit_order_and_cut_transactions_whole(tmp_path):
    """ts comes from change_events' ingest sequence, which every replica shares, not from each
    replica's own version, so Account's and Contact's feeds merge in commit order, and a cut at their common
    resolved step holds a transaction that spans both objects in both or in neither."""
    from replication.changefeed.reader import read_consistent
    from resources.delta import CHANGE_EVENTS

    warehouse = DeltaWarehouse(root=str(tmp_path / "warehouse"))
    account, contact = Replica(tmp_path / "warehouse", "Account"), Replica(tmp_path / "warehouse", "Contact")
    account.create(applied(("001A", "Acme", 400)), applied=0)
    contact.create(applied(("003Z", "Zed", 400)), applied=0)
    config = feed(tmp_path)
    uris = {n: config.object_uri(n) for n in ("Account", "Contact")}
    for name in uris:
        export_changefeed(warehouse, name, config)
    # Three transactions in commit order; TX2 changes an Account and a Contact.
    warehouse.append(
        CHANGE_EVENTS,
        events(
            ("Contact", "003A", 501, "TX1", 1),
            ("Account", "001B", 502, "TX2", 2),
            ("Contact", "003X", 502, "TX2", 2),
            ("Account", "001C", 503, "TX3", 3),
        ),
        read=None,
        partition_by=["entity"],
        key="cdc.change_events",
        state={},
        txns={},
    )
    account.merge(applied(("001B", "Bravo", 502), ("001C", "Charlie", 503)), applied=3)  # one run: through 3
    contact.merge(applied(("003A", "Alpha", 501)), applied=1)  # Contact's run stopped at ingest 1
    for name in uris:
        export_changefeed(warehouse, name, config)
    # Both replicas are at version 1: versions say nothing about which change came first.
    assert [r["ts"] for r in changes(feed(tmp_path)) if r["key"] == ["001B"]] == [[2, 502]]

    cut, got = read_consistent(uris)
    assert cut == 1  # Contact resolved through ingest 1 only
    assert [(n, r["key"][0]) for n, r in got] == [("Contact", "003A")]  # not TX2's Account half

    contact.merge(applied(("003X", "Xray", 502)), applied=3)
    export_changefeed(warehouse, "Contact", config)
    cut, got = read_consistent(uris, after=cut)
    assert cut == 3
    assert [(n, r["key"][0], r["ts"]) for n, r in got] == [
        ("Account", "001B", [2, 502]),
        ("Contact", "003X", [2, 502]),  # TX2: one ts in both feeds, whole
        ("Account", "001C", [3, 503]),
    ]


def test_a_held_transaction_keeps_the_resolved_step_below_it(tmp_path, replica):
    """A replica commit that holds an open transaction back (rows from ingest 4 on) resolves only through 3, and
    the changes of a later commit are stamped at least at the ingest the replica had applied through (6), so a
    key's changes stay in ts order even when that commit's own position goes back (a resync replaying)."""
    config = feed(tmp_path)
    export_changefeed(replica.warehouse, "Account", config)
    replica.merge(rows(("001A", "Acme 2", 1.0, False, 3)), applied=6, held={"transactions": ["TXH"], "from_seq": 4})
    export_changefeed(replica.warehouse, "Account", config)
    assert ChangefeedReader(config.object_uri("Account")).resolved() == [3, 0]
    replica.resync(rows(("001A", "Acme 3", 1.0, False, 4), ("001B", "Globex", 2.0, False, 2)), applied=2)
    export_changefeed(replica.warehouse, "Account", config)  # a resync's applied_through goes back (replay)
    assert [r["ts"] for r in changes(config)] == [[6, 0], [6, 0]]  # the resync's 2 raised to 6
    assert ChangefeedReader(config.object_uri("Account")).resolved() == [3, 0]


def resynced_replica(root: Path, size: int) -> tuple[Replica, list[tuple]]:
    """A replica of `size` rows, written as one file of one row group, and its resync rows: every 50th row's Name
    changed, every 97th marked deleted."""
    replica = Replica(root)
    everyone = [(f"001{i:05d}", f"n{i}", float(i), False, 1) for i in range(size)]
    replica.create(rows(*everyone))
    changed = [
        (i, n + " resynced" if k % 50 == 0 else n, a, k % 97 == 0, s) for k, (i, n, a, d, s) in enumerate(everyone)
    ]
    return replica, changed


def by_key(config: ChangefeedConfig) -> list[dict]:
    return sorted(changes(config), key=lambda r: (r["ts"], r["key"], "erase" in r))


@pytest.mark.parametrize("fan_out", [64, 3])
def test_a_resync_larger_than_a_batch_is_netted_in_bounded_parts_with_the_same_records(tmp_path, monkeypatch, fan_out):
    """A resync overwrite puts the whole table in its version's CDF twice; with `batch_rows`
    smaller than that, the export partitions it by a hash of Id into parts of at most a batch (every key's rows in
    one; with a fan-out of 3, in two levels of spill files), and writes the same records as one pass."""
    from replication.changefeed import parts as parts_module

    monkeypatch.setattr(parts_module, "FAN_OUT", fan_out)
    replica, changed = resynced_replica(tmp_path / "warehouse", 600)
    small, big = feed(tmp_path / "small", initial_scan=True, batch_rows=100), feed(tmp_path / "big", initial_scan=True)
    for config in (small, big):
        export_changefeed(replica.warehouse, "Account", config)
    replica.resync(rows(*changed))
    _, parts = parts_module.cdf_parts(replica.warehouse.table("Account"), 1, 1, 100)
    sizes, keys = [], []
    for part in parts:
        sizes.append(part.num_rows)
        keys.append(set(part["Id"].to_pylist()))
    assert sum(sizes) == 1200 and max(sizes) <= 100 and len(sizes) >= 12  # 1200 CDF rows: each old and new row
    assert all(a.isdisjoint(b) for n, a in enumerate(keys) for b in keys[n + 1 :])  # a key in one part only
    for config in (small, big):
        export_changefeed(replica.warehouse, "Account", config)
    assert (
        by_key(small) == by_key(big) and len(changes(big)) == 600 + 11 + 7
    )  # scan, 11 updates, 7 erases (row 0 is both)
    assert replay(records(small)) == replica.live()


def test_the_export_reads_the_replica_and_its_changes_in_batches_of_at_most_batch_rows(tmp_path, monkeypatch):
    """The initial scan and a resync's export take the replica's rows from the readers (resources/delta_changes.py)
    at most `batch_rows` at a time, and net them in parts of at most that many, although the replica is one row
    group of 600 rows and its resync's CDF 1,200: seen through the batches and parts the export is handed."""
    from cdc_assets.changefeed import export as export_module
    from replication.changefeed import parts as parts_module

    handed: dict[str, list[int]] = {"scan": [], "cdf": [], "parts": []}

    def counted(kind, reader):
        def read(*args, **kw):
            for batch in reader(*args, **kw):
                handed[kind].append(batch.num_rows)
                yield batch

        return read

    monkeypatch.setattr(export_module, "snapshot_batches", counted("scan", export_module.snapshot_batches))
    monkeypatch.setattr(parts_module, "change_batches", counted("cdf", parts_module.change_batches))
    monkeypatch.setattr(
        export_module, "net_changes", lambda part: (handed["parts"].append(part.num_rows), net_changes(part))[1]
    )
    replica, changed = resynced_replica(tmp_path / "warehouse", 600)
    config = feed(tmp_path, initial_scan=True, batch_rows=50)
    export_changefeed(replica.warehouse, "Account", config)
    replica.resync(rows(*changed))
    export_changefeed(replica.warehouse, "Account", config)
    assert sum(handed["scan"]) == 600 and max(handed["scan"]) <= 50
    assert sum(handed["cdf"]) == 1200 and max(handed["cdf"]) <= 50
    assert sum(handed["parts"]) == 1200 and max(handed["parts"]) <= 50
    assert len(changes(config)) == 600 + 11 + 7 and replay(records(config)) == replica.live()


def test_a_column_added_and_backfilled_shows_in_the_lines_of_the_versions_after_it(tmp_path, replica):
    config = feed(tmp_path, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    tier = pa.field("Tier", pa.string())
    replica.warehouse.table("Account").alter.add_columns(Schema.from_arrow(pa.schema([tier])).fields)
    read = replica.warehouse.reloaded("Account")
    backfill = pa.table({"Id": ["001A"], "Tier": ["Gold"], "_sf_bucket": ["001"]})
    replica.warehouse.update_columns(
        "Account",
        backfill,
        read=read,
        key_column="Id",
        columns=["Tier"],
        partition_column="_sf_bucket",
        partition_values=["001"],
        key=REPLICA_STATE,
        state=replica._state(read, None),
        txns={},
    )
    later = rows(("001B", "Globex 2", 2.0, False, 5))
    replica.merge(later.append_column(tier, pa.array(["Silver"])))
    export_changefeed(replica.warehouse, "Account", config)  # one export across the schema change

    got = {(r["ts"][0], r["key"][0]): r for r in changes(config)}
    assert "Tier" not in got[(0, "001A")]["newImage"]  # lines before the column carry no key for it
    filled = got[(2, "001A")]  # the backfill: an update of that column alone
    assert filled["newImage"]["Tier"] == "Gold" and filled["oldImage"]["Tier"] is None
    assert filled["newImage"]["Name"] == filled["oldImage"]["Name"] == "Acme"
    assert got[(3, "001B")]["newImage"]["Tier"] == "Silver"
    assert replay(records(config))["001A"]["Tier"] == "Gold"


def test_a_column_rewritten_with_a_new_type_shows_as_updates_of_the_records_whose_value_changed(tmp_path, replica):
    config = feed(tmp_path, initial_scan=True)
    export_changefeed(replica.warehouse, "Account", config)
    # What a retype's rewrite commits (replication/retype.py): Amount, a double, now text, with the org's values.
    current = read_table(replica.warehouse.table("Account"))
    amounts = {"001A": "1", "001B": "two"}
    retyped = current.set_column(
        current.schema.get_field_index("Amount"),
        pa.field("Amount", pa.string()),
        pa.array([amounts[i] for i in current["Id"].to_pylist()], pa.string()),
    )
    replica.resync(retyped)
    export_changefeed(replica.warehouse, "Account", config)

    # The feed reads every version with the newest schema: the old value as the new type renders it (1.0 as "1"),
    # so a record whose value reads the same emits nothing, and one whose value changed is an update.
    updates = [r for r in changes(config) if r["ts"][0] == 1]
    assert {r["key"][0]: (r["oldImage"]["Amount"], r["newImage"]["Amount"]) for r in updates} == {"001B": ("2", "two")}
    assert replay(records(config))["001B"]["Amount"] == "two"
