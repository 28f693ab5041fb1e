"""`python -m demo --org` (`make run-org`): the whole stack against a real org, from the ``SF_*`` variables.

No emulator and no workload: the org is whatever the variables name (README "Operating it", the real-org
checklist). The same pieces as `make run`, from `demo/processes.py`, started in this order, for these reasons:

1. **The variables** must make a complete login (``resources.salesforce.login_flow``) over https
   (``check_urls``): otherwise the command refuses at once, naming the variables to set, before anything starts.
2. **Spark Connect** (unless ``--no-spark-connect``): the runs share one warm JVM.
3. **The CDC subscriber**, and the command waits until its stream is ``RUNNING`` (subscribed) before Dagster starts.
   The subscriber must be subscribed before the first initial load: an initial load's Bulk snapshot then overlaps
   the stream, and events committed before a record's SystemModstamp are skipped, later ones applied, so nothing
   committed between snapshot and subscription is lost. Its first start is at ``LATEST`` (the initial load covers
   what came before); later starts resume from its saved position.
4. **dagster dev** with the sensors running (``CDC_SENSORS_RUNNING=1``): the reconciliation sensor requests every
   replica's initial load at once, the landing sensor applies the events.

Paths: ``CDC_CONFIG``, ``CDC_LANDING_ZONE``, ``CDC_WAREHOUSE``, ``CDC_CHANGEFEED`` and ``DAGSTER_HOME`` are used when
set, else they live under ``--root`` (default ``.org``). The subscriber and Dagster share the config (the objects a
resync marker names) and the landing zone, where the subscriber keeps its positions and status
(``<landing>/_subscriber``, read by ``subscriber_status_sensor``). A ``DAGSTER_HOME`` that already holds a
``dagster.yaml`` is left as it is (it must keep the settings of README "Dagster instance"); a new one gets the
repository's. Ctrl-C (or SIGTERM) stops everything: the subscriber first, which lands its open file.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import time
from pathlib import Path

from cdc_subscriber.cli import DEFAULT_ENDPOINT
from demo import processes
from demo.instance import fail_orphaned_runs, write_dagster_home
from demo.main import WORKSPACE
from resources.salesforce import ENV_VARS, MISSING_CREDENTIALS, InsecureUrlError, check_urls, login_flow
from shared.subscriber_state import read_statuses, state_dir_for

log = logging.getLogger("demo.org")

SUBSCRIBED_TIMEOUT_SECONDS = 180.0
STATUS_EVERY_SECONDS = 60


def org_variables(environ: dict[str, str]) -> dict[str, str]:
    """The ``SF_*`` variables of `environ` (the org, its credentials, its Pub/Sub endpoint), or SystemExit naming
    what to set when they make no complete login."""
    org = {k: v for k, v in environ.items() if k.startswith("SF_") and v}
    values = {name: org.get(var) for name, var in ENV_VARS.items()}
    try:
        check_urls(values)
    except InsecureUrlError as exc:
        raise SystemExit(f"python -m demo --org: {exc}") from None
    flow = login_flow(values)
    if flow is None:
        raise SystemExit(
            f"python -m demo --org needs the org's variables: {MISSING_CREDENTIALS}. Set: "
            f"{', '.join(sorted(org)) or 'none'}. See README, Operating it: a real org."
        )
    if flow == "token":
        log.warning(
            "SF_ACCESS_TOKEN: a fixed session cannot be renewed; use the JWT bearer or client credentials "
            "flow for anything that runs longer than the session timeout"
        )
    log.info("org %s, login flow %s", org.get("SF_INSTANCE_URL", "(from the token response)"), flow)
    return org


def _path(environ: dict[str, str], variable: str, default: Path) -> Path:
    return Path(environ.get(variable) or default).resolve()


def wait_until_subscribed(
    subscriber: subprocess.Popen,
    state_dir: Path,
    log_file: Path,
    stop: processes.StopOnSignal,
    timeout_seconds: float = SUBSCRIBED_TIMEOUT_SECONDS,
) -> None:
    """Until the subscriber reports a RUNNING stream; SystemExit when it exits or does not subscribe in time."""
    deadline = time.monotonic() + timeout_seconds
    while not stop.wait(0.5):
        if subscriber.poll() is not None:
            raise SystemExit(
                f"the CDC subscriber exited with code {subscriber.returncode} before subscribing; see "
                f"{log_file} (wrong credentials, or a user without the permissions of README's checklist)"
            )
        statuses = read_statuses(state_dir)
        if statuses and all(s.state == "RUNNING" for s in statuses):
            return
        if time.monotonic() > deadline:
            errors = "; ".join(s.last_error for s in statuses if s.last_error) or "no status yet"
            raise SystemExit(
                f"the CDC subscriber did not subscribe within {timeout_seconds:.0f} s ({errors}); see {log_file}"
            )


def run_against_org(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    env_in = dict(os.environ if environ is None else environ)
    org = org_variables(env_in)
    root = (args.root or processes.REPO / ".org").resolve()
    root.mkdir(parents=True, exist_ok=True)
    config = _path(env_in, "CDC_CONFIG", args.config)
    landing = _path(env_in, "CDC_LANDING_ZONE", root / "landing")
    warehouse = _path(env_in, "CDC_WAREHOUSE", root / "warehouse")
    changefeed = _path(env_in, "CDC_CHANGEFEED", root / "changefeed")
    home = _path(env_in, "DAGSTER_HOME", root / "dagster_home")
    if not (home / "dagster.yaml").exists():
        write_dagster_home(home)
    if orphans := fail_orphaned_runs(home):
        log.info("marked %d runs left in flight by an earlier session as failed", orphans)
    stop = processes.StopOnSignal()

    logs = {name: root / f"{name}.log" for name in ("spark_connect", "subscriber", "dagster")}
    spark_server = subscriber = dagster = None
    try:
        extra: dict[str, str] = {}
        if not args.no_spark_connect:
            log.info("starting the Spark Connect server the runs share (log: %s)", logs["spark_connect"])
            spark_server, extra["SPARK_REMOTE"] = processes.start_spark_connect(logs["spark_connect"], args.spark_port)
        env = processes.platform_env(
            home=home, config=config, landing=landing, warehouse=warehouse, org=org, changefeed=changefeed, extra=extra
        )
        endpoint = org.get("SF_PUBSUB_ENDPOINT", DEFAULT_ENDPOINT)
        log.info("starting the CDC subscriber on %s (log: %s)", endpoint, logs["subscriber"])
        subscriber = processes.start_subscriber(
            env, landing, endpoint, config, logs["subscriber"], initial_replay="LATEST"
        )
        wait_until_subscribed(subscriber, state_dir_for(landing), logs["subscriber"], stop)
        if stop.is_set():
            return 0
        log.info("subscribed; starting dagster dev with the sensors running (log: %s)", logs["dagster"])
        dagster = processes.start(
            ["dagster", "dev", "-w", str(WORKSPACE), "-h", "127.0.0.1", "-p", str(args.ui_port)],
            env,
            log_file=logs["dagster"],
        )
        ui_url = f"http://127.0.0.1:{args.ui_port}"
        processes.wait_for_http(f"{ui_url}/server_info", dagster, stop=stop)
        if not stop.is_set():
            processes.wait_for_code_location(ui_url, dagster)
            print(
                f"\n  Dagster UI         {ui_url}   (sensors running)\n  Salesforce org     "
                f"{org.get('SF_INSTANCE_URL', '(from the login)')}, Pub/Sub API {endpoint}\n  landing zone       "
                f"{landing}\n  Delta warehouse    {warehouse}\n  logs               {root}/*.log\n  Ctrl-C stops "
                f"everything.\n",
                flush=True,
            )
        last_status = time.monotonic()
        while not stop.wait(1):
            exited = processes.first_exited(
                {
                    "dagster dev": (dagster, logs["dagster"]),
                    "the CDC subscriber": (subscriber, logs["subscriber"]),
                    "the Spark Connect server": (spark_server, logs["spark_connect"]),
                }
            )
            if exited:
                log.error(exited)
                return 1
            if time.monotonic() - last_status >= STATUS_EVERY_SECONDS:
                last_status = time.monotonic()
                for s in read_statuses(state_dir_for(landing)):
                    log.info(
                        "subscriber %s: %s, %d events landed, lag %.1fs",
                        s.topic,
                        s.effective_state(),
                        s.events_landed,
                        s.lag_seconds or 0,
                    )
        return 0
    finally:
        log.info("stopping: subscriber, Dagster, Spark")
        for process in (subscriber, dagster, spark_server):  # the subscriber first: it lands its open file
            if process is not None:
                processes.stop(process)
        fail_orphaned_runs(home)
        log.info("stopped")
