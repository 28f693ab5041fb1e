"""Dagster's own processes (`dagster dev`, `dagster-daemon run`) as children we can stop cleanly.

Each child starts in its own session, so stopping it reaches everything it started (webserver, daemon, code
server, run workers): first SIGINT to the child (Dagster's orderly shutdown), then, after a grace period, SIGKILL
to its process group. The environment tells the code location (definitions.py) where everything is.

Each child gets the secrets it uses and no others: Dagster (the code location and its runs) the org's ``SF_*``
credentials, the hash salt and the Spark Connect token (in ``SPARK_REMOTE``); the CDC subscriber the org's
credentials and the salt (its config needs it), not the token; the Spark Connect server none of them, only its own
token. Every child runs with umask 077 (`PRIVATE_UMASK`), so what it creates (landing files, Delta tables, staging
files) is its user's alone, as are the logs the children write into.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from object_schema.hashing import SALT_ENV
from resources import spark_connect
from resources.storage import PRIVATE_UMASK  # the children write the org's data (landing files, tables, logs)
from salesforce_emulator import Emulator

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# How often a start is checked for readiness (a port listening, a URL answering): each check is a connection
# attempt, and a start found ready a second late makes the demo, the benches and the tests wait for nothing.
READY_POLL_SECONDS = 0.2
# The platform's own variables (org credentials, the hash salt, paths, Dagster's home), which the Spark Connect
# server does not use: a client with its token runs code in it, so it holds nothing worth more than that.
PLATFORM_PREFIXES = ("SF_", "CDC_", "DAGSTER_")
# What Dagster uses and the subscriber does not. (It keeps the hash salt: it loads replication.yaml for the objects
# to subscribe to, and the config refuses to load without the salt when an object hashes.)
NOT_FOR_SUBSCRIBER = ("SPARK_REMOTE", spark_connect.TOKEN_ENV)


def emulator_org_env(emu: Emulator) -> dict[str, str]:
    """The ``SF_*`` variables that point the platform at an emulator, as at any org (a token, its URL, its CA)."""
    return {
        "SF_INSTANCE_URL": emu.instance_url,
        "SF_ACCESS_TOKEN": emu.token,
        "SF_CA_BUNDLE": str(Path(emu.ca_file).resolve()),
    }


def platform_env(
    *,
    home: Path,
    config: Path,
    landing: Path,
    warehouse: Path,
    emu: Emulator | None = None,
    org: dict[str, str] | None = None,
    changefeed: Path | None = None,
    sensors_running: bool = True,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of the code location: where config, landing zone, warehouse and org are. The org is `emu`
    (the demo's emulator) or `org`, its ``SF_*`` variables (a real org); the hash salt (``CDC_HASH_SALT``) when this
    process has one; no other SF_/CDC_/DAGSTER_ variable of this process leaks through."""
    if (emu is None) == (org is None):
        raise ValueError("platform_env needs the org: either emu (an emulator) or org (SF_* variables)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES)}
    if salt := os.environ.get(SALT_ENV):
        env[SALT_ENV] = salt
    env |= {
        "DAGSTER_HOME": str(Path(home).resolve()),
        "CDC_CONFIG": str(Path(config).resolve()),
        "CDC_LANDING_ZONE": str(Path(landing).resolve()),
        "CDC_WAREHOUSE": str(Path(warehouse).resolve()),
        "CDC_CHANGEFEED": str(Path(changefeed or Path(warehouse).parent / "changefeed").resolve()),
        "CDC_SENSORS_RUNNING": "1" if sensors_running else "0",
        **(emulator_org_env(emu) if emu is not None else dict(org or {})),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return env | (extra or {})


class StopOnSignal:
    """Set by SIGINT or SIGTERM (handlers installed at creation); what the demo's main loop waits on.

    Not a `threading.Event`: its `set()` takes the lock that `Event.wait()` holds while it wakes up, and a signal
    handler runs in the main thread, the very one waiting, so a signal arriving at that moment deadlocks
    `python -m demo` for good (SIGTERM during the status loop's wait: the demo and its children hang). Here the
    handler only stores the signal number.
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.signum: int | None = None
        for signum in signals:  # handled (not ignored), so children start with the default handlers
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.signum = signum

    def is_set(self) -> bool:
        return self.signum is not None

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds, less once a signal came; whether one came."""
        deadline = time.monotonic() + timeout
        while not self.is_set() and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
        return self.is_set()


def free_port(port: int = 0, host: str = "127.0.0.1") -> int:
    """`port` if nothing listens there (0: any free port); raises OSError if it is taken."""
    with socket.socket() as probe:
        probe.bind((host, port))
        return probe.getsockname()[1]


def private_log(log_file: Path) -> int:
    """`log_file` opened for appending, readable by its owner only (a child's output may quote the org's data)."""
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)  # also a log an earlier session left readable by others
    return fd


def start(command: list[str], env: dict[str, str], log_file: Path | None = None, cwd: Path = REPO) -> subprocess.Popen:
    """Start `command` (a Dagster CLI in this virtualenv) in its own session, with `PRIVATE_UMASK`; output to
    `log_file` if given."""
    out = private_log(log_file) if log_file else None
    try:
        return subprocess.Popen(
            [str(BIN / command[0]), *command[1:]],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
            umask=PRIVATE_UMASK,
        )
    finally:
        if out:
            os.close(out)


def stop(process: subprocess.Popen, grace_seconds: float = 30.0) -> int | None:
    """Orderly shutdown, then SIGKILL to whatever of its process group is left."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # run workers and code servers it left behind
    try:
        return process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def start_subscriber(
    env: dict[str, str], landing: Path, endpoint: str, config: Path, log_file: Path, initial_replay: str = "EARLIEST"
) -> subprocess.Popen:
    """The CDC subscriber (``python -m cdc_subscriber subscribe``) landing the org's Pub/Sub events into `landing`,
    from `initial_replay` the first time (the demo: EARLIEST, so its generated org lands too; a real org: LATEST,
    the initial load covers what came before), then from its position. `env`: the code location's
    (`platform_env`); the subscriber gets `subscriber_env` of it."""
    return start(
        [
            "python",
            "-m",
            "cdc_subscriber",
            "--landing-dir",
            str(Path(landing).resolve()),
            "subscribe",
            "--endpoint",
            endpoint,
            "--config",
            str(Path(config).resolve()),
            "--initial-replay",
            initial_replay,
        ],
        subscriber_env(env),
        log_file=log_file,
    )


def subscriber_env(env: dict[str, str]) -> dict[str, str]:
    """The code location's environment `env` less what only Dagster uses (`NOT_FOR_SUBSCRIBER`)."""
    return {k: v for k, v in env.items() if k not in NOT_FOR_SUBSCRIBER}


def first_exited(children: dict[str, tuple[subprocess.Popen | None, Path]]) -> str | None:
    """A message naming the first of `children` (name -> process, its log) that has exited, or None."""
    for name, (process, log_file) in children.items():
        if process is not None and process.poll() is not None:
            return f"{name} exited with code {process.returncode}; see {log_file}"
    return None


def spark_connect_env(token: str) -> dict[str, str]:
    """The Spark Connect server's environment: this process's without the platform's variables
    (`PLATFORM_PREFIXES`) or a client's, with the token it requires."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES) and k != "SPARK_REMOTE"}
    return env | {spark_connect.TOKEN_ENV: token}


def start_spark_connect(
    log_file: Path,
    port: int = 0,
    timeout_seconds: float = 180.0,
    conf: dict[str, str] | None = None,
    warm_up_lines: int | None = None,
) -> tuple[subprocess.Popen, str]:
    """A Spark Connect server (`resources.spark_connect`) for the runs to share, once it accepts connections, on
    loopback and requiring a new random token; and the `SPARK_REMOTE` URL of it, token included (give it only to
    Dagster's processes, print it only through `spark_connect.redacted`). Port 0: any free port.
    `warm_up_lines`: the server's `--warm-up-lines` (None: its default; the warm-up goes on in the background after
    this returns)."""
    port = free_port(port)
    extra = [arg for key, value in (conf or {}).items() for arg in ("--conf", f"{key}={value}")]
    if warm_up_lines is not None:
        extra += ["--warm-up-lines", str(warm_up_lines)]
    token = secrets.token_urlsafe(32)
    process = start(
        ["python", "-m", "resources.spark_connect", "--port", str(port), *extra],
        spark_connect_env(token),
        log_file=log_file,
    )
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with code {process.returncode}; see {log_file}")
        try:
            socket.create_connection((spark_connect.DEFAULT_HOST, port), timeout=2).close()
            return process, spark_connect.url(port, token)
        except OSError:
            time.sleep(READY_POLL_SECONDS)
    stop(process)
    raise TimeoutError(f"the Spark Connect server did not listen on port {port} within {timeout_seconds:.0f} s")


LOCATIONS_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def graphql(ui_url: str, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{ui_url}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def wait_for_code_location(ui_url: str, process: subprocess.Popen, timeout_seconds: float = 180.0) -> str:
    """Wait until the webserver has loaded the code location; its name, or an error naming what failed."""
    wait_for_http(f"{ui_url}/server_info", process, timeout_seconds)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        entries = graphql(ui_url, LOCATIONS_QUERY)["workspaceOrError"].get("locationEntries") or []
        loaded = [e for e in entries if e["loadStatus"] == "LOADED"]
        if loaded and all(e["locationOrLoadError"] for e in loaded):
            errors = [e for e in loaded if e["locationOrLoadError"]["__typename"] == "PythonError"]
            if errors:
                raise RuntimeError(
                    f"code location {errors[0]['name']} failed to load: {errors[0]['locationOrLoadError']['message']}"
                )
            return loaded[0]["name"]
        time.sleep(1)
    raise TimeoutError(f"no code location loaded at {ui_url} within {timeout_seconds:.0f} s")


def wait_for_http(
    url: str,
    process: subprocess.Popen,
    timeout_seconds: float = 180.0,
    stop: StopOnSignal | threading.Event | None = None,
) -> None:
    """Wait until `url` answers 200, failing early if `process` exits (and giving up quietly on `stop`)."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with code {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(READY_POLL_SECONDS)
    if stop and stop.is_set():
        return
    raise TimeoutError(f"{url} did not answer within {timeout_seconds:.0f} s")
