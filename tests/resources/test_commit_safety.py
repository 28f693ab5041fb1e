"""Commits on object storage (resources/commit_safety.py): no setting and no store that would let two writers both
commit one Delta version gets a run started, and on a store that honours conditional writes (moto's S3 server)
two writers racing for one version end with exactly one commit each, nothing overwritten.

The races of the platform's own writers (ingest, apply) on S3 are in tests/replication/test_concurrent_writers.py
(parametrized over a local and an S3 warehouse)."""

from __future__ import annotations

import threading

import dagster as dg
import obstore
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from harness import Platform, load_lines, write_config
from obstore.store import from_url
from s3_server import s3_server
from settings import TEST_SPARK_CONF

from definitions import build_defs
from resources.commit_safety import PROBE_FOLDER, UnsafeCommitsError, ensure_safe_commits
from resources.delta import DeltaWarehouse, read_table
from resources.storage import Folder

UNSAFE_ENVIRONMENT = [
    ("AWS_S3_ALLOW_UNSAFE_RENAME", "true"),
    ("AWS_S3_LOCKING_PROVIDER", "dynamodb"),
    ("AWS_CONDITIONAL_PUT", "disabled"),
]


@pytest.mark.parametrize(("variable", "value"), UNSAFE_ENVIRONMENT)
def test_an_unsafe_setting_stops_the_definitions_from_loading_with_what_to_do(
    variable, value, monkeypatch, tmp_path, sample_dir
):
    monkeypatch.setenv(variable, value)
    with pytest.raises(
        UnsafeCommitsError,
        match=rf"Refusing to write the Delta warehouse s3://b/w: environment "
        rf"variable {variable}={value}: .*Unset it",
    ):
        build_defs(
            config_path=write_sample_config(tmp_path, sample_dir),
            landing_path=str(tmp_path / "landing"),
            warehouse_root="s3://b/w",
        )
    # A local warehouse commits by rename-if-absent: the variable is irrelevant there.
    build_defs(
        config_path=write_sample_config(tmp_path, sample_dir),
        landing_path=str(tmp_path / "landing"),
        warehouse_root=str(tmp_path / "warehouse"),
    )


def write_sample_config(tmp_path, sample_dir):
    return write_config(tmp_path / "replication.yaml", sample_dir / "describe", ["Account"])


def test_an_unsafe_storage_option_is_refused_too():
    warehouse = DeltaWarehouse(root="s3://b/w", storage_options={"allow_unsafe_rename": "true"})
    with pytest.raises(UnsafeCommitsError, match="storage option allow_unsafe_rename=true"):
        ensure_safe_commits(warehouse.root, dict(warehouse.storage_options))


def test_a_run_refuses_to_start_on_s3_with_an_unsafe_setting_and_writes_nothing(
    tmp_path, s3, spark, sample_dir, monkeypatch
):
    platform = s3_sample_platform(tmp_path, s3, sample_dir)
    monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")  # set after the definitions loaded: the run refuses
    result = platform.run(raise_on_error=False)
    assert not result.success
    assert "AWS_S3_ALLOW_UNSAFE_RENAME=true" in failure_text(result)
    assert platform.table_version("_change_events") is None and platform.rows("Account") == {}


def test_a_store_that_ignores_conditional_writes_is_refused_before_a_run_writes(
    tmp_path, s3, spark, sample_dir, monkeypatch
):
    with s3_server(ignore_conditional_writes=True) as careless:
        monkeypatch.setenv("AWS_ENDPOINT_URL", careless.endpoint)
        bucket = careless.new_bucket()
        # What the probe guards against: this store accepts a second create-only put of an existing object.
        folder = Folder(f"s3://{bucket}/x")
        store = from_url(f"s3://{bucket}/x")
        obstore.put(store, "a", b"1", mode="create")
        obstore.put(store, "a", b"2", mode="create")  # no error: a writer would have overwritten another's commit
        assert folder.read_text("a") == "2"

        platform = s3_sample_platform(tmp_path, careless, sample_dir, bucket=bucket)
        result = platform.run(raise_on_error=False)
        assert not result.success
        assert "ignores conditional writes" in failure_text(result)
        assert platform.table_version("_change_events") is None and platform.rows("Account") == {}
        assert Folder(f"s3://{bucket}/warehouse/{PROBE_FOLDER}").names() == []  # the probe cleaned up


def test_the_probe_passes_on_a_store_that_honours_conditional_writes_and_leaves_nothing(s3):
    root = f"s3://{s3.new_bucket()}/warehouse"
    ensure_safe_commits(root, {})
    assert Folder(f"{root}/{PROBE_FOLDER}").names() == []


def test_two_writers_racing_for_one_version_on_s3_never_lose_a_commit(s3):
    """Pairs of writers append to one table at the same moment, each from the version both read. The store lets one
    create the next commit file; the other is refused, re-reads, and commits the version after: every row lands,
    every version holds exactly one writer's commit."""
    uri = f"s3://{s3.new_bucket()}/race"
    write_deltalake(uri, pa.table({"writer": pa.array([], pa.string())}), mode="error")
    rounds, errors = 6, []
    for round_ in range(rounds):
        readers = [DeltaTable(uri), DeltaTable(uri)]  # both read the same version
        start = threading.Barrier(2)

        def write(table: DeltaTable, name: str, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                write_deltalake(table, pa.table({"writer": [name]}), mode="append")
            except Exception as exc:  # noqa: BLE001 (collected and asserted below)
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(t, f"{round_}-{n}")) for n, t in enumerate(readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert errors == []
    table = DeltaTable(uri)
    assert table.version() == 2 * rounds
    assert sorted(read_table(table).column("writer").to_pylist()) == sorted(
        f"{r}-{n}" for r in range(rounds) for n in range(2)
    )
    assert len(table.history()) == 2 * rounds + 1  # one commit per version: none overwritten


def s3_sample_platform(tmp_path, server, sample_dir, bucket: str | None = None) -> Platform:
    bucket = bucket or server.new_bucket()
    platform = Platform(
        tmp_path,
        sample_dir / "describe",
        ["Account", "Contact", "Opportunity"],
        TEST_SPARK_CONF,
        landing_uri=f"s3://{bucket}/landing",
        warehouse_uri=f"s3://{bucket}/warehouse",
    )
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    return platform


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(
        str(e.event_specific_data.error)
        for e in result.all_events
        if e.is_failure
        and e.event_specific_data is not None
        and getattr(e.event_specific_data, "error", None) is not None
    )
