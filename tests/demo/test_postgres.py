"""The Dagster instance on PostgreSQL: the local cluster `make run PG=1` and the tests start (demo/postgres.py) is
private and needs its password, and deploy/dagster-postgres.yaml after the repository's dagster.yaml is an instance
whose runs and pool slots are rows of that database, its connection read from the `DAGSTER_PG_*` variables."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
from settings import REPO

from demo import postgres as pg
from demo import processes
from demo.instance import INSTANCE_YAML, open_instance, write_dagster_home
from demo.main import _start_postgres


def test_the_local_cluster_is_private_listens_on_loopback_and_needs_its_password(postgres):
    for path in (postgres.root, postgres.data, postgres.root / "socket"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert (postgres.root / "password").stat().st_mode & 0o777 == 0o600
    with psycopg2.connect(postgres.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SHOW listen_addresses")
        assert cur.fetchone() == ("127.0.0.1",)
        cur.execute("SHOW password_encryption")
        assert cur.fetchone() == ("scram-sha-256",)
    wrong = postgres.dsn().replace(f"password={postgres.password}", "password=not-the-password")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(wrong)


def test_the_production_instance_keeps_runs_and_pool_slots_in_the_database_its_variables_name(
    postgres, tmp_path, monkeypatch
):
    cluster = pg.database(postgres, "production_shaped")
    home = write_dagster_home(tmp_path / "home", storage="postgres")  # the DAGSTER_PG_* references kept
    text = (home / "dagster.yaml").read_text()
    assert text.startswith(INSTANCE_YAML.read_text()) and "env: DAGSTER_PG_PASSWORD" in text
    assert postgres.password not in text
    for name, value in cluster.env().items():
        monkeypatch.setenv(name, value)
    with open_instance(home) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        run = instance.create_run_for_job(dg.GraphDefinition("noop").to_job(), run_id=None)
        instance.event_log_storage.set_concurrency_slots("replica_Account", 1)
    assert not (home / "history").exists()  # nothing of SQLite's in the home
    with psycopg2.connect(cluster.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id FROM runs")
        assert [row[0] for row in cur.fetchall()] == [run.run_id]
        cur.execute("SELECT count(*) FROM concurrency_slots WHERE concurrency_key = 'replica_Account'")
        assert cur.fetchone() == (1,)


def test_a_missing_variable_is_named_when_the_instance_opens(tmp_path, monkeypatch):
    home = write_dagster_home(tmp_path / "home", storage="postgres")
    for name in pg.PG_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Exception, match="DAGSTER_PG_"):
        open_instance(home)


def test_make_run_pg_1_runs_the_demo_on_postgres():
    def command(*args: str) -> str:
        return subprocess.run(["make", "-n", "run", *args], cwd=REPO, capture_output=True, text=True).stdout

    assert "-m demo --postgres" in command("PG=1")
    assert "-m demo --postgres" not in command() and "-m demo" in command()


def test_the_demo_cluster_keeps_its_data_and_password_across_sessions():
    # Not under pytest's tmp folder: run as root, the server's account must pass through the folders above it.
    root = Path(tempfile.mkdtemp(prefix="sf-cdc-demo-"))
    try:
        cluster = _start_postgres(root, processes.free_port())
        assert cluster.root == root / "postgres" and cluster.root.stat().st_mode & 0o777 == 0o700
        with psycopg2.connect(cluster.dsn()) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE kept (x int)")
        password = cluster.password
        again = _start_postgres(root, processes.free_port())  # the server left running is stopped, then started
        assert again.password == password
        with psycopg2.connect(again.dsn()) as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM kept")
            assert cur.fetchone() == (0,)
        pg.stop(again)
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(again.dsn(), connect_timeout=5)
    finally:
        shutil.rmtree(root, ignore_errors=True)
