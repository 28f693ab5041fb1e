"""The systemd units of deploy/ (docs/operations/deploy.md): their policies, read from the files, and each unit's
exact ExecStart started, without systemd, against the HTTPS emulator, each process doing its job.

How a unit is run here as systemd would run it:
- the unit file is parsed (`configparser`: systemd's INI shape, one value per key here);
- its environment is systemd's for a service (PATH=`SYSTEMD_PATH`, no virtualenv on it; HOME, USER, LOGNAME) plus
  its EnvironmentFile, which is the repository's `deploy/<name>.env.example` with these values replaced: the deploy
  paths (`/opt/sf-cdc/.venv` -> the virtualenv running the tests, `/opt/sf-cdc` -> this checkout,
  `/var/lib/sf-cdc` and `/etc/sf-cdc` -> folders of tmp_path), the ports (free ones), the Spark token and the hash
  salt (random), and the org (the emulator's URL, CA, Pub/Sub endpoint and a client-credentials login instead of the
  JWT bearer one's key); plus PYTHONPATH=this checkout, since the shared virtualenv's editable install points at
  another checkout (on a host, /opt/sf-cdc's own install does this);
- ExecStart is split like systemd does (`${VAR}`: one word, `$VAR` alone: split at spaces), the deploy paths in it
  replaced the same way, and started in WorkingDirectory with its UMask, in a process group of its own (its
  control group); stopped with SIGTERM, systemd's KillSignal, as its KillMode says.
ProtectSystem, PrivateTmp and the other sandboxing settings need systemd itself: what they imply is followed by the
env files instead (CDC_SPARK_STAGING: a run and the Spark server share no /tmp) and said in the docs page.

The units run on either instance: the repository's dagster.yaml (SQLite in DAGSTER_HOME), or on PostgreSQL, the
dagster.yaml followed by deploy/dagster-postgres.yaml with the env files' commented `DAGSTER_PG_*` lines taken in,
pointing at the tests' throwaway cluster (the `postgres` fixture).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import psycopg2
import pytest
import yaml
from deltalake import DeltaTable
from settings import REPO

from demo import postgres as pg
from demo import processes
from demo.instance import STORAGES, Storage, write_dagster_home
from resources import spark_connect
from resources.delta import CHANGE_EVENTS, read_table
from resources.network import is_loopback
from resources.salesforce import ENV_VARS
from salesforce_emulator import Emulator
from shared.subscriber_state import read_statuses, state_dir_for

DEPLOY = REPO / "deploy"
UNITS = {path.stem: path for path in sorted(DEPLOY.glob("*.service"))}
USER = "sf-cdc"
OPT, VAR, ETC = "/opt/sf-cdc", "/var/lib/sf-cdc", "/etc/sf-cdc"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's default for services
# The variables of the org, the salt and the Spark token: each only in the env files of processes that use them.
ORG_SECRETS = ("SF_CLIENT_ID", "SF_CLIENT_SECRET", "SF_USERNAME", "SF_PASSWORD", "SF_PRIVATE_KEY_FILE")
SECRETS = (
    *ORG_SECRETS,
    "SF_ACCESS_TOKEN",
    "CDC_HASH_SALT",
    "SPARK_REMOTE",
    "SPARK_CONNECT_AUTHENTICATE_TOKEN",
    "DAGSTER_PG_PASSWORD",
)
USES = {
    "sf-cdc-spark-connect": {"SPARK_CONNECT_AUTHENTICATE_TOKEN"},
    "sf-cdc-subscriber": {*ORG_SECRETS, "CDC_HASH_SALT"},
    "sf-cdc-code-server": {*ORG_SECRETS, "CDC_HASH_SALT", "SPARK_REMOTE", "DAGSTER_PG_PASSWORD"},
    "sf-cdc-daemon": {"DAGSTER_PG_PASSWORD"},
    "sf-cdc-webserver": {"DAGSTER_PG_PASSWORD"},
}
# The processes opening the Dagster instance (its runs are the code server's children): on PostgreSQL each needs
# the DAGSTER_PG_* variables, commented out in their env files while the instance is SQLite.
INSTANCE_UNITS = ("sf-cdc-code-server", "sf-cdc-daemon", "sf-cdc-webserver")
PG_COMMENTED = "#DAGSTER_PG_"
# SF_* names the platform reads (resources/salesforce.py, cdc_subscriber/cli.py): a misspelt one would be ignored.
SF_READ = {*ENV_VARS.values(), "SF_PUBSUB_ENDPOINT", "SF_TENANT_ID"}
LISTENERS = ("sf-cdc-webserver",)  # on a TCP port: said on the command line
SOCKET_ENV = "DAGSTER_CODE_SERVER_SOCKET"  # the code server's unix socket, in a folder of the sf-cdc user only
CLEAN_EXIT = {0, -signal.SIGTERM, 128 + signal.SIGTERM}  # systemd counts a SIGTERM death as a clean stop
# The server's default warm-up (40,000 lines) would hold both cores while every other unit starts and the landing
# run goes through it; a small one still passes through the env file's options, split at spaces.
WARM_UP_LINES = 2_000
POLL_SECONDS = 0.25


def read_unit(path: Path) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # systemd's keys are case-sensitive
    unit.read_string(path.read_text())
    return unit


def read_env_file(path: Path, *, postgres: bool = False) -> dict[str, str]:
    """An EnvironmentFile: VAR=value lines, whole-line comments (# or ;), values stripped and unquoted; with
    `postgres` the `#DAGSTER_PG_*` lines uncommented, as the operator moving the instance to PostgreSQL does."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if postgres and line.startswith(PG_COMMENTED):
            line = line[1:]
        if line and not line.startswith(("#", ";")):
            name, value = line.split("=", 1)
            env[name.strip()] = value.strip().strip('"')
    return env


def env_example(unit: configparser.ConfigParser) -> Path:
    """The deploy/*.env.example of a unit's EnvironmentFile=/etc/sf-cdc/<name>.env."""
    return DEPLOY / (Path(unit["Service"]["EnvironmentFile"]).name + ".example")


def command_line(exec_start: str, env: dict[str, str]) -> list[str]:
    """ExecStart as systemd expands it: `$VAR` as a word of its own splits at whitespace, `${VAR}` is one word."""
    words = []
    for word in shlex.split(exec_start):
        if whole := re.fullmatch(r"\$(\w+)", word):
            words += env.get(whole[1], "").split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m[1], ""), word))
    return words


def option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


@pytest.mark.parametrize("name", sorted(UNITS))
def test_each_unit_restarts_on_failure_as_its_own_user_private_and_sandboxed(name):
    unit = read_unit(UNITS[name])
    service = unit["Service"]
    assert service["Restart"] == "on-failure" and int(service["RestartSec"]) > 0
    assert int(unit["Unit"]["StartLimitIntervalSec"]) > 0 and int(unit["Unit"]["StartLimitBurst"]) > 0
    assert service["User"] == service["Group"] == USER
    assert service["UMask"] == "0077"  # landing files, tables, logs: 0600 files, 0700 folders
    assert service["NoNewPrivileges"] == service["PrivateTmp"] == "yes" and service["ProtectSystem"] == "strict"
    assert service["ReadWritePaths"] == VAR and service["WorkingDirectory"] == VAR
    assert service["EnvironmentFile"].startswith(f"{ETC}/") and env_example(unit).exists()
    assert service["ExecStart"].startswith(f"{OPT}/.venv/bin/")  # systemd wants an absolute program
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.parametrize("name", sorted(UNITS))
def test_each_unit_listens_on_loopback_only_and_names_only_variables_its_file_sets(name):
    unit = read_unit(UNITS[name])
    env = read_env_file(env_example(unit))
    exec_start = unit["Service"]["ExecStart"]
    named = set(re.findall(r"\$\{?(\w+)\}?", exec_start))
    assert named <= set(env), f"{name}: ExecStart names {named - set(env)}, which its env file does not set"
    words = command_line(exec_start, env)
    assert "--behind-tls-proxy" not in words
    host = option(words, "--host")
    if name in LISTENERS:  # Dagster's servers: said on the command line
        assert is_loopback(host), f"{name} listens on {host}"
    elif name == "sf-cdc-code-server":  # no port at all: a unix socket, in a folder no other user may enter
        assert host is None and option(words, "--port") is None
        socket_path = Path(option(words, "--socket") or "")
        assert socket_path.parent.parent == Path(VAR), socket_path  # a folder of its own (0700: deploy.md, step 2)
    else:  # the Spark Connect server listens on its module's loopback default; the others listen on nothing
        assert host is None and is_loopback(spark_connect.DEFAULT_HOST)


def test_the_daemon_and_webserver_start_once_the_code_server_serves():
    code_server = read_unit(UNITS["sf-cdc-code-server"])["Service"]
    assert "grpc-health-check" in code_server["ExecStartPost"]  # the unit is active once definitions.py is served
    for name in ("sf-cdc-daemon", "sf-cdc-webserver"):
        unit = read_unit(UNITS[name])["Unit"]
        assert "sf-cdc-code-server.service" in unit["After"].split() and "sf-cdc-code-server.service" in unit["Wants"]


def test_the_daemon_and_webserver_reach_the_code_server_on_its_socket():
    [location] = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())["load_from"]
    assert location["grpc_server"]["socket"] == {"env": SOCKET_ENV} and "port" not in location["grpc_server"]
    sockets = {name: read_env_file(env_example(read_unit(UNITS[name])))[SOCKET_ENV] for name in INSTANCE_UNITS}
    assert len(set(sockets.values())) == 1, sockets  # the one the code server serves on
    code_server = read_unit(UNITS["sf-cdc-code-server"])["Service"]
    assert f"--socket ${{{SOCKET_ENV}}}" in code_server["ExecStart"]
    assert f"--socket ${{{SOCKET_ENV}}}" in code_server["ExecStartPost"]  # its readiness asked on the same socket
    docs = (REPO / "docs" / "operations" / "deploy.md").read_text()
    folder = str(Path(next(iter(sockets.values()))).parent)
    assert re.search(rf"install -d -o sf-cdc -g sf-cdc -m 0700 [^`]*{re.escape(folder)}\b", docs)


@pytest.mark.parametrize("name", sorted(UNITS))
def test_secrets_go_only_to_the_process_that_uses_them(name):
    env = read_env_file(env_example(read_unit(UNITS[name])), postgres=True)
    assert {k for k in env if k in SECRETS} <= USES[name]
    assert {k for k in env if k.startswith("SF_")} <= SF_READ  # no misspelt SF_ variable
    if name == "sf-cdc-spark-connect":
        assert not [k for k in env if k.startswith(("SF_", "CDC_", "DAGSTER_"))]  # a client with its token runs code


def test_every_process_opening_the_instance_has_the_postgres_variables_its_dagster_yaml_reads():
    storage = yaml.safe_load((DEPLOY / "dagster-postgres.yaml").read_text())["storage"]["postgres"]["postgres_db"]
    read = {value["env"] for value in storage.values() if isinstance(value, dict)}
    assert read == set(pg.PG_ENV)
    settings = []
    for name, path in UNITS.items():
        example = env_example(read_unit(path))
        postgres = {k: v for k, v in read_env_file(example, postgres=True).items() if k.startswith("DAGSTER_PG_")}
        assert not [k for k in read_env_file(example) if k.startswith("DAGSTER_PG_")]  # SQLite until uncommented
        assert set(postgres) == (read if name in INSTANCE_UNITS else set()), name
        settings += [postgres] if postgres else []
    assert all(s == settings[0] for s in settings)  # one database, the same in each file


def test_the_spark_token_is_the_same_in_the_server_and_the_code_location():
    server = read_env_file(DEPLOY / "spark-connect.env.example")
    client = read_env_file(DEPLOY / "code-server.env.example")
    port, token = server["SPARK_CONNECT_PORT"], server["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
    assert client["SPARK_REMOTE"] == f"sc://localhost:{port}/;token={token}"


# --- each ExecStart started --------------------------------------------------------------------------------------


class Host:
    """tmp_path as the host's folders (`/var/lib/sf-cdc`, `/etc/sf-cdc`), the env files the operator writes, and the
    units started from their ExecStart."""

    def __init__(self, root: Path, emu: Emulator, cluster: pg.LocalPostgres | None = None):
        self.var, self.etc = root / "var", root / "etc"
        self.var.mkdir(mode=0o700)
        self.etc.mkdir()
        # the virtualenv first: this test's own (/opt/sf-cdc/.venv is the checkout's there, a shared one here)
        self.paths = {f"{OPT}/.venv": sys.prefix, OPT: str(REPO), VAR: str(self.var), ETC: str(self.etc)}
        # The docs page's install steps: the instance's dagster.yaml, the staging folder, replication.yaml.
        # On PostgreSQL the file is the docs' `cat dagster.yaml deploy/dagster-postgres.yaml`: DAGSTER_PG_* references.
        write_dagster_home(self.var / "dagster_home", storage="postgres" if cluster else "sqlite").chmod(0o700)
        (self.var / "spark-staging").mkdir(mode=0o700)
        (self.var / "code-server").mkdir(mode=0o700)  # the code server's socket
        (self.etc / "replication.yaml").write_text("options: {initial_load: false}\nobjects: [Account]\n")
        token = secrets.token_urlsafe(32)
        self.ports = {name: str(processes.free_port()) for name in ("SPARK_CONNECT_PORT", "DAGSTER_WEBSERVER_PORT")}
        org = {
            "SF_INSTANCE_URL": emu.instance_url,
            "SF_CLIENT_ID": "emulator-client",  # the emulator's client-credentials app
            "SF_CLIENT_SECRET": "emulator-secret",
            "SF_CA_BUNDLE": str(Path(emu.ca_file).resolve()),
            "SF_PUBSUB_ENDPOINT": emu.pubsub_address,
        }
        self.env: dict[str, dict[str, str]] = {}
        for name, path in UNITS.items():
            example = read_env_file(env_example(read_unit(path)), postgres=cluster is not None)
            env = {k: self._here(v) for k, v in example.items() if k not in ("SF_USERNAME", "SF_PRIVATE_KEY_FILE")}
            env |= {k: v for k, v in self.ports.items() if k in env}
            if "SPARK_CONNECT_AUTHENTICATE_TOKEN" in env:
                env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
            if "SPARK_REMOTE" in env:
                env["SPARK_REMOTE"] = f"sc://localhost:{self.ports['SPARK_CONNECT_PORT']}/;token={token}"
            if "CDC_HASH_SALT" in env:
                env["CDC_HASH_SALT"] = "a-test-salt"
            if "SPARK_CONNECT_OPTIONS" in env:  # the warm-up's paths: tests/resources/test_spark_warm_up.py
                env["SPARK_CONNECT_OPTIONS"] += f" --warm-up-lines {WARM_UP_LINES}"
            if any(k.startswith("SF_") for k in env):
                env = {k: v for k, v in env.items() if not k.startswith("SF_")} | org
            if cluster is not None and "DAGSTER_PG_HOST" in env:
                env |= cluster.env()
            self.env[name] = env
        self.started: dict[str, subprocess.Popen] = {}

    def _here(self, text: str) -> str:
        for deploy_path, local in self.paths.items():
            text = text.replace(deploy_path, local)
        return text

    def environment(self, name: str) -> dict[str, str]:
        """What systemd gives the service: its own basics, the EnvironmentFile, nothing of this process."""
        basics = {"PATH": SYSTEMD_PATH, "HOME": str(self.var), "USER": USER, "LOGNAME": USER, "LANG": "C.UTF-8"}
        return basics | self.env[name] | {"PYTHONPATH": str(REPO)}

    def start(self, name: str) -> subprocess.Popen:
        service = read_unit(UNITS[name])["Service"]
        env = self.environment(name)
        command = [self._here(word) for word in command_line(service["ExecStart"], env)]
        log = os.open(self.var / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            process = subprocess.Popen(
                command,
                env=env,
                cwd=self._here(service["WorkingDirectory"]),
                umask=int(service["UMask"], 8),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(log)
        self.started[name] = process
        if post := service.get("ExecStartPost"):  # systemd: the unit is active, and its After= units start, once done
            command = [self._here(word) for word in command_line(post, env)]
            timeout = float(service.get("TimeoutStartSec", 90))
            ready = subprocess.run(command, env=env, cwd=self._here(service["WorkingDirectory"]), timeout=timeout)
            assert ready.returncode == 0, f"{name}: ExecStartPost failed:\n{self.log(name)}"
        return process

    def log(self, name: str) -> str:
        return (self.var / f"{name}.log").read_text()[-3000:]

    def wait(self, name: str, what: str, ready, timeout_seconds: float = 180.0):
        """Until `ready()` is truthy (its value), failing with the unit's log when it exits or times out."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if value := ready():
                return value
            process = self.started[name]
            assert process.poll() is None, f"{name} exited ({process.returncode}) before {what}:\n{self.log(name)}"
            time.sleep(POLL_SECONDS)
        pytest.fail(f"{name}: no {what} within {timeout_seconds:.0f} s:\n{self.log(name)}")

    def stop(self, name: str) -> int | None:
        """As systemd stops a unit (KillSignal=SIGTERM): SIGTERM to each of its processes (KillMode=control-group,
        the default; here its process group) or to the main one only (mixed), SIGKILL to what is left once the main
        process is gone or TimeoutStopSec passed; the main process's exit status, None if it had to be killed."""
        service = read_unit(UNITS[name])["Service"]
        process = self.started[name]
        with contextlib.suppress(ProcessLookupError):
            if service.get("KillMode", "control-group") == "control-group":
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
        try:
            status = process.wait(timeout=float(service["TimeoutStopSec"]))
        except subprocess.TimeoutExpired:
            status = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return status


def listening(port: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
        return True
    except OSError:
        return False


# A PySpark client of the server, as a run is: SPARK_REMOTE from the code location's env file.
CLIENT = "from pyspark.sql import SparkSession; print(SparkSession.builder.create().range(5).count())"


def landed_files(landing: Path) -> list[Path]:
    return [p for p in landing.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]


def change_event_ids(warehouse: Path) -> set[str]:
    table = warehouse / CHANGE_EVENTS
    if not (table / "_delta_log").exists():
        return set()
    return set(read_table(DeltaTable(str(table)), columns=["record_id"]).column("record_id").to_pylist())


def runs_in(cluster: pg.LocalPostgres) -> dict[str, str]:
    """run id -> status of the runs in the instance's database."""
    with psycopg2.connect(cluster.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, status FROM runs")
        return dict(cur.fetchall())


def heartbeats_in(cluster: pg.LocalPostgres) -> list[str]:
    """The daemons whose heartbeats are in the instance's database."""
    with psycopg2.connect(cluster.dsn()) as conn, conn.cursor() as cur:
        cur.execute("SELECT daemon_type FROM daemon_heartbeats")
        return [row[0] for row in cur.fetchall()]


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_each_unit_started_from_its_exec_start_does_its_job(tmp_path, request, storage: Storage):
    """Spark Connect serves a client holding the token; the subscriber subscribes and lands the org's change; the
    code server becomes ready (its ExecStartPost); the webserver answers; the daemon's heartbeats pass
    `dagster-daemon liveness-check` and its landing sensor has a run, started by the code server, ingest the landed
    file through the Spark server. Then each stops cleanly on SIGTERM. On PostgreSQL, the daemon's landing run and
    its heartbeats are rows of the database the env files name, and the home holds no SQLite storage."""
    cluster = pg.database(request.getfixturevalue("postgres"), "systemd_units") if storage == "postgres" else None
    with ExitStack() as stack:
        emu = stack.enter_context(Emulator(tmp_path / "org", pubsub=True, keepalive_seconds=1.0))
        host = Host(tmp_path, emu, cluster)
        stopped = {}

        def stop_all() -> None:
            for name in reversed(list(host.started)):  # the order of docs/operations/deploy.md, backwards
                stopped[name] = host.stop(name)

        stack.callback(stop_all)
        for name in ("sf-cdc-spark-connect", "sf-cdc-subscriber", "sf-cdc-code-server"):
            host.start(name)
        # As systemd: the daemon and the webserver once the code server's ExecStartPost passed; they start while
        # the subscriber lands, and the landing sensor finds the file at a tick after it landed.
        for name in ("sf-cdc-daemon", "sf-cdc-webserver"):
            host.start(name)
        # A run's PySpark client of the server (SPARK_REMOTE from the code location's env file), in the background
        # while the other units come up; its answer is read below.
        host.wait("sf-cdc-spark-connect", "port", lambda: listening(host.ports["SPARK_CONNECT_PORT"]))
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT],
            env=host.environment("sf-cdc-code-server"),
            cwd=host.var,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stack.callback(client.kill)
        landing = host.var / "landing"
        status = host.wait(
            "sf-cdc-subscriber",
            "subscription",
            lambda: [s for s in read_statuses(state_dir_for(landing)) if s.state == "RUNNING"],
        )
        assert status[0].topic == "/data/ChangeEvents"
        with emu.store.transaction() as txn:  # after the subscription: the unit starts at LATEST
            record_id = txn.create("Account", {"Name": "Deployed Ltd"})
        [landed] = host.wait("sf-cdc-subscriber", "landed file", lambda: landed_files(landing))
        assert landed.stat().st_mode & 0o777 == 0o600 and record_id in landed.read_text()

        ui_url = f"http://127.0.0.1:{host.ports['DAGSTER_WEBSERVER_PORT']}"
        processes.wait_for_http(f"{ui_url}/server_info", host.started["sf-cdc-webserver"])

        def daemon_live() -> bool:
            check = subprocess.run(
                [str(processes.BIN / "dagster-daemon"), "liveness-check"],
                env=host.environment("sf-cdc-daemon"),
                capture_output=True,
                text=True,
                timeout=120,
            )
            return check.returncode == 0 and "Daemon live" in check.stdout

        host.wait("sf-cdc-daemon", "heartbeat", daemon_live)

        out, err = client.communicate(timeout=180)
        assert out.strip().splitlines()[-1:] == ["5"], err[-2000:]

        host.wait("sf-cdc-daemon", "landing run", lambda: record_id in change_event_ids(host.var / "warehouse"))
        if cluster is not None:  # the landing run is a row of the database the env files name
            assert {"STARTED", "SUCCESS"} & set(runs_in(cluster).values()), runs_in(cluster)  # it may be finishing
            assert heartbeats_in(cluster)
            assert not (host.var / "dagster_home" / "history").exists()  # SQLite's run and event storage
        stop_all()
        host.started.clear()
    assert stopped and set(stopped.values()) <= CLEAN_EXIT, stopped
