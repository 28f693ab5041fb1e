"""A local PostgreSQL cluster for the Dagster instance (`make run PG=1`, and the tests' `postgres` fixture): made with
`initdb` and run with `pg_ctl`, in a folder of its own, no system service and no superuser password anyone chose.

Safe by default: the data folder and the folder holding the server's unix socket are 0700; the server listens on
127.0.0.1 only; every connection, TCP or socket, needs the password (scram-sha-256), which is generated at `initdb`
and kept in `password` (0600) beside the data. PostgreSQL refuses to run as root: under root the cluster belongs to
the `postgres` system account (Debian's postgresql package creates it), which must be able to reach the folder.

The instance reads its connection from the variables of `deploy/dagster-postgres.yaml` (`PG_ENV`), which `env()`
gives for this cluster.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

# The variables deploy/dagster-postgres.yaml reads: where the instance's database is and who connects.
PG_ENV = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD")
USER = DATABASE = "dagster"
SERVER_ACCOUNT = "postgres"  # who runs the server when this process is root
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)  # Debian's layout, newest first
START_TIMEOUT_SECONDS = 60


class PostgresMissing(RuntimeError):
    """initdb or pg_ctl is not installed."""


def pg_tool(name: str) -> str:
    """The path of a PostgreSQL server program (`initdb`, `pg_ctl`): on PATH, or in Debian's versioned folder."""
    if found := shutil.which(name):
        return found
    for folder in PG_BIN_DIRS:
        if (folder / name).exists():
            return str(folder / name)
    raise PostgresMissing(
        f"{name} not found (on PATH or in /usr/lib/postgresql/*/bin): install the PostgreSQL server "
        "(Debian: apt-get install postgresql), or run on the SQLite instance (`make run` without PG=1)"
    )


@dataclass(frozen=True)
class LocalPostgres:
    """A cluster in `root` (data/, socket/, password, postgres.log) serving on 127.0.0.1:`port`; the instance's
    tables go into `database`."""

    root: Path
    port: int
    database: str = DATABASE

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def password(self) -> str:
        return (self.root / "password").read_text().strip()

    def env(self) -> dict[str, str]:
        """The `DAGSTER_PG_*` variables of deploy/dagster-postgres.yaml for this cluster."""
        return dict(zip(PG_ENV, ("127.0.0.1", str(self.port), self.database, USER, self.password), strict=True))

    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={self.database} user={USER} password={self.password}"


def _as_server() -> dict:
    """subprocess arguments that run a server program as the account owning the cluster (see the module doc)."""
    if os.geteuid() != 0:
        return {}
    try:
        account = pwd.getpwnam(SERVER_ACCOUNT)
    except KeyError as exc:
        raise PostgresMissing(
            f"PostgreSQL does not run as root and there is no {SERVER_ACCOUNT!r} account to run it as: "
            "run as a regular user, or install Debian's postgresql package (it creates the account)"
        ) from exc
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _private_dir(path: Path, owner: dict) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    if owner:
        os.chown(path, owner["user"], owner["group"])


def _reachable(path: Path, owner: dict) -> None:
    """Refuse, saying what to do, when the server's account cannot reach `path` (a parent it may not enter)."""
    if not owner:
        return
    for parent in path.resolve().parents:
        st = parent.stat()
        if st.st_uid == owner["user"] or st.st_mode & 0o001 or (st.st_gid == owner["group"] and st.st_mode & 0o010):
            continue
        raise PermissionError(
            f"the {SERVER_ACCOUNT} account cannot enter {parent} (mode {st.st_mode & 0o777:o}) to reach {path}: "
            f"run as a regular user, or let others pass through that folder (chmod o+x {parent})"
        )


def _initdb(root: Path, owner: dict) -> None:
    """A new cluster: superuser `dagster` with a generated password, password authentication for every connection."""
    password_file = root / "password"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    if owner:
        os.chown(password_file, owner["user"], owner["group"])
    subprocess.run(
        [
            pg_tool("initdb"),
            "--pgdata",
            str(root / "data"),
            "--username",
            USER,
            "--pwfile",
            str(password_file),
            "--auth",
            "scram-sha-256",
            "--encoding",
            "UTF8",
            "--no-instructions",
        ],
        check=True,
        capture_output=True,
        text=True,
        **owner,
    )


def _pg_ctl(cluster: LocalPostgres, *args: str, owner: dict, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [pg_tool("pg_ctl"), "--pgdata", str(cluster.data), *args], check=check, capture_output=True, text=True, **owner
    )


def start(root: Path, port: int) -> LocalPostgres:
    """Start the cluster in `root` on 127.0.0.1:`port` (made with initdb if new; a server an earlier session left
    running is stopped first), with the database `dagster` created. Returns once it accepts connections."""
    owner = _as_server()
    root = Path(root).resolve()
    _reachable(root, owner)
    _private_dir(root, owner)
    _private_dir(root / "socket", owner)
    cluster = LocalPostgres(root, port)
    if not (cluster.data / "PG_VERSION").exists():
        _initdb(root, owner)
    if _pg_ctl(cluster, "status", owner=owner, check=False).returncode == 0:
        _pg_ctl(cluster, "stop", "--mode", "fast", owner=owner)
    options = " ".join(
        shlex.quote(option)
        for option in (
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"port={port}",
            "-c",
            f"unix_socket_directories={root / 'socket'}",
        )
    )
    log = root / "postgres.log"
    started = _pg_ctl(cluster, "start", "--wait", "--log", str(log), "--options", options, owner=owner, check=False)
    if started.returncode != 0:
        tail = log.read_text()[-2000:] if log.exists() else started.stderr
        raise RuntimeError(f"PostgreSQL did not start in {root} (log {log}):\n{tail}")
    return database(cluster, DATABASE)


def database(cluster: LocalPostgres, name: str) -> LocalPostgres:
    """`cluster` with its instance in the database `name` (created if new): one instance per database, so that
    instances sharing a cluster (the tests' stacks) never see each other's runs."""
    import psycopg2

    if not name.isidentifier():
        raise ValueError(f"database name {name!r}: letters, digits and underscores only")
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        try:
            conn = psycopg2.connect(replace(cluster, database="postgres").dsn())
            break
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE DATABASE {name}")
    finally:
        conn.close()
    return replace(cluster, database=name)


def stop(cluster: LocalPostgres) -> None:
    """Stop the server (fast: open connections are closed, committed data kept)."""
    with contextlib.suppress(PostgresMissing):
        _pg_ctl(cluster, "stop", "--mode", "fast", owner=_as_server(), check=False)
