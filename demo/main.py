"""`python -m demo`: emulator + workload + CDC subscriber + `dagster dev` with sensors on, until Ctrl-C or SIGTERM.

The emulator serves its change events over the Pub/Sub API; the subscriber (`python -m cdc_subscriber subscribe`)
lands them in the landing zone, where Dagster's sensors pick them up: emulator -> subscriber -> landing zone ->
Dagster, as with a real org. `--emulator-lands` skips the subscriber (the emulator writes the files itself). `--org` runs the same stack
against a real org instead (demo/real_org.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from demo import postgres, processes
from demo.instance import fail_orphaned_runs, write_dagster_home
from demo.org import WorkloadThread, open_org
from demo.processes import REPO
from resources import spark_connect
from shared.subscriber_state import read_statuses, state_dir_for

log = logging.getLogger("demo")

STATUS_EVERY_SECONDS = 60
WORKSPACE = Path(__file__).resolve().parent / "workspace.yaml"  # definitions.py, in-process executor


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="where org, landing zone, warehouse live (default .demo; with --org, .org)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("CDC_DEMO_PORT", 8443)),
        help="Salesforce emulator port (env CDC_DEMO_PORT)",
    )
    parser.add_argument("--ui-port", type=int, default=int(os.environ.get("CDC_DEMO_UI_PORT", 3000)))
    parser.add_argument("--accounts", type=int, default=500, help="size of a newly generated org")
    parser.add_argument("--rate", type=float, default=6.0, help="workload transactions per second")
    parser.add_argument("--config", type=Path, default=REPO / "replication.yaml")
    parser.add_argument(
        "--spark-port",
        type=int,
        default=int(os.environ.get("CDC_DEMO_SPARK_PORT", 15002)),
        help="port of the Spark Connect server the runs share (env CDC_DEMO_SPARK_PORT)",
    )
    parser.add_argument(
        "--pubsub-port",
        type=int,
        default=int(os.environ.get("CDC_DEMO_PUBSUB_PORT", 7443)),
        help="the emulator's Pub/Sub API port (env CDC_DEMO_PUBSUB_PORT)",
    )
    parser.add_argument(
        "--emulator-lands", action="store_true", help="no subscriber: the emulator writes the landing files itself"
    )
    parser.add_argument(
        "--no-spark-connect",
        action="store_true",
        help="no shared Spark server: every run starts its own local Spark JVM",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the Dagster instance on a local PostgreSQL cluster in <root>/postgres (demo/postgres.py; `make run "
        "PG=1`) instead of SQLite",
    )
    parser.add_argument(
        "--pg-port",
        type=int,
        default=int(os.environ.get("CDC_DEMO_PG_PORT", 5433)),
        help="with --postgres, the cluster's port on 127.0.0.1 (env CDC_DEMO_PG_PORT)",
    )
    parser.add_argument(
        "--org",
        action="store_true",
        help="no emulator: run Spark Connect, the subscriber and Dagster against the org the SF_* "
        "variables name (demo/real_org.py; --root default .org)",
    )
    return parser


def _banner(ui_url: str, emu, root: Path, log_file: Path, spark: str) -> str:  # type: ignore[no-untyped-def]
    status = (
        "python -m cdc_subscriber status"
        if root == REPO / ".demo"
        else f"python -m cdc_subscriber --landing-dir {root / 'landing'} status"
    )
    landing = (
        f"  CDC subscriber     Pub/Sub API {emu.pubsub_address} -> landing zone; status: {status} "
        f"(log {root / 'subscriber.log'})"
        if emu.events is not None
        else "  CDC                the emulator writes the landing files itself"
    )
    return "\n".join(
        [
            "",
            f"  Dagster UI         {ui_url}   (sensors running; assets materialize on their own)",
            f"  Salesforce org     {emu.instance_url}   token {emu.token}, CA {emu.ca_file}",
            landing,
            f"  Spark              {spark}",
            f"  landing zone       {root / 'landing'}",
            f"  Delta warehouse    {root / 'warehouse'}",
            f"  changefeeds        {root / 'changefeed'}   (read: replication/changefeed/reader.py)",
            f"  Dagster log        {log_file}",
            "  latency probe      python -m demo.latency",
            "  commands           in another shell: source .venv/bin/activate (README, top)",
            '  on purpose         gap events and overflows (GAP_OVERFLOW -> resync) are injected: README "The demo"',
            "  Ctrl-C stops everything.",
            "",
        ]
    )


def _landing_status(emu, root: Path) -> str:  # type: ignore[no-untyped-def]
    if emu.events is None:
        return f"{len(emu.publisher.writer.published) if emu.publisher else 0} landing files"
    streams = read_statuses(state_dir_for(root / "landing"))
    return (
        "; ".join(
            f"subscriber {s.effective_state()}: {s.events_landed} events in {s.files_landed} files, "
            f"lag {s.lag_seconds or 0:.1f}s"
            for s in streams
        )
        or "subscriber not reporting yet"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the Dagster instance's storage migrations
    # What this process writes (the emulator's org and landing files, demo.json with its token) is private too.
    umask = os.umask(processes.PRIVATE_UMASK)
    try:
        if args.org:
            if args.postgres:
                raise SystemExit(
                    "--postgres runs the emulator demo's instance on a local cluster; against a real org, put the "
                    "instance on your PostgreSQL (docs/operations/dagster-postgres.md)"
                )
            from demo.real_org import run_against_org

            return run_against_org(args)
        return _run(args)
    finally:
        os.umask(umask)


def _start_postgres(root: Path, port: int) -> postgres.LocalPostgres:
    """The demo's PostgreSQL cluster in <root>/postgres, started (demo/postgres.py)."""
    try:
        processes.free_port(port)
    except OSError as exc:
        raise SystemExit(f"port {port} for PostgreSQL is taken ({exc}); set CDC_DEMO_PG_PORT") from exc
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0:
        # The server runs as the postgres account, which must pass through <root> to its own 0700 folder; what
        # else <root> holds stays private (0700 folders, 0600 files), passing through lists nothing.
        root.chmod(0o711)
    log.info(
        "starting PostgreSQL for the Dagster instance (%s, log: %s)", root / "postgres", root / "postgres/postgres.log"
    )
    try:
        return postgres.start(root / "postgres", port)
    except (postgres.PostgresMissing, PermissionError) as exc:
        raise SystemExit(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    root = (args.root or REPO / ".demo").resolve()
    stop = processes.StopOnSignal()

    try:
        processes.free_port(args.ui_port)
    except OSError as exc:
        raise SystemExit(f"port {args.ui_port} for the Dagster UI is taken ({exc}); set CDC_DEMO_UI_PORT") from exc
    if not args.no_spark_connect:
        try:
            processes.free_port(args.spark_port)
        except OSError as exc:
            raise SystemExit(
                f"port {args.spark_port} for the Spark Connect server is taken ({exc}); set "
                f"CDC_DEMO_SPARK_PORT, or --no-spark-connect"
            ) from exc
    cluster = _start_postgres(root, args.pg_port) if args.postgres else None
    home = write_dagster_home(
        root / "dagster_home", storage="postgres" if cluster else "sqlite", pg=cluster.env() if cluster else None
    )
    if orphans := fail_orphaned_runs(home):
        log.info("marked %d runs left in flight by an earlier session as failed", orphans)
    if not args.emulator_lands:
        try:
            processes.free_port(args.pubsub_port)
        except OSError as exc:
            raise SystemExit(
                f"port {args.pubsub_port} for the Pub/Sub API is taken ({exc}); set CDC_DEMO_PUBSUB_PORT"
            ) from exc
    emu, workload = open_org(
        root / "org",
        root / "landing",
        port=args.port,
        accounts=args.accounts,
        emulator_lands=args.emulator_lands,
        pubsub_port=args.pubsub_port,
    )
    worker = WorkloadThread(workload, rate=args.rate)
    dagster = spark_server = subscriber = None
    try:
        spark = "a local JVM per run"
        extra = {}
        if not args.no_spark_connect:
            log.info("starting the Spark Connect server the runs share (log: %s)", root / "spark_connect.log")
            spark_server, extra["SPARK_REMOTE"] = processes.start_spark_connect(
                root / "spark_connect.log", args.spark_port
            )
            spark = spark_connect.redacted(extra["SPARK_REMOTE"])
        env = processes.platform_env(
            home=home, config=args.config, landing=root / "landing", warehouse=root / "warehouse", emu=emu, extra=extra
        )
        if not args.emulator_lands:
            log.info("starting the CDC subscriber (log: %s)", root / "subscriber.log")
            subscriber = processes.start_subscriber(
                env, root / "landing", emu.pubsub_address, args.config, root / "subscriber.log"
            )
        log_file = root / "dagster.log"
        dagster = processes.start(
            ["dagster", "dev", "-w", str(WORKSPACE), "-h", "127.0.0.1", "-p", str(args.ui_port)], env, log_file=log_file
        )
        ui_url = f"http://127.0.0.1:{args.ui_port}"
        (root / "demo.json").write_text(
            json.dumps(
                {
                    "ui_url": ui_url,
                    "instance_url": emu.instance_url,
                    "token": emu.token,
                    "ca_file": emu.ca_file,
                    "landing_dir": str(root / "landing"),
                    "warehouse": str(root / "warehouse"),
                    "dagster_home": str(home),
                },
                indent=1,
            )
        )
        worker.start()
        log.info("starting dagster dev (log: %s)", log_file)
        processes.wait_for_http(f"{ui_url}/server_info", dagster, stop=stop)
        if not stop.is_set():
            processes.wait_for_code_location(ui_url, dagster)
            print(_banner(ui_url, emu, root, log_file, spark), flush=True)
        last_status = time.monotonic()
        while not stop.wait(1):
            exited = processes.first_exited(
                {
                    "dagster dev": (dagster, log_file),
                    "the CDC subscriber": (subscriber, root / "subscriber.log"),
                    "the Spark Connect server": (spark_server, root / "spark_connect.log"),
                }
            )
            if exited:
                log.error(exited)
                return 1
            if time.monotonic() - last_status < STATUS_EVERY_SECONDS:
                continue
            last_status, stats = time.monotonic(), worker.stats
            log.info(
                "workload: %d transactions, %d record changes so far; %s",
                stats.get("transactions", 0),
                stats.get("record_changes", 0),
                _landing_status(emu, root),
            )
        return 0
    finally:
        log.info("stopping: workload, subscriber, Dagster, Spark, emulator")
        if worker.is_alive():
            worker.stop()
        if subscriber is not None:
            processes.stop(subscriber)  # SIGINT: it lands its open file and saves its position
        if dagster is not None:
            processes.stop(dagster)
        if spark_server is not None:
            processes.stop(spark_server)
        fail_orphaned_runs(home)
        if cluster is not None:
            postgres.stop(cluster)
        emu.stop()
        (root / "demo.json").unlink(missing_ok=True)
        log.info("stopped")
