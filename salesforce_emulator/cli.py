"""``python -m salesforce_emulator serve | generate``.

``serve`` runs the org over HTTPS until interrupted and writes ``<data-dir>/serve.json`` (URL, CA file, token) so
other processes can find it. ``generate`` builds an org and/or makes changes: through the REST API of a running
``serve`` (found from ``serve.json``, or ``--instance-url``), or, when nothing is serving, straight into the store
of ``--data-dir`` (fast) with events written to ``--landing-dir``. Two processes never write one store directly.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from salesforce_emulator.emulator import Emulator
from salesforce_emulator.faults import SALESFORCE_DIFF_OVER_CHARS, FaultConfig

DEFAULT_DATA_DIR = Path(".demo/salesforce")
DEFAULT_LANDING_DIR = Path(".demo/landing")
DEFAULT_PORT = 8443


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m salesforce_emulator", description="A local Salesforce org over HTTPS that emits CDC events."
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="org store, TLS files, bulk results")
    parser.add_argument("--landing-dir", type=Path, default=DEFAULT_LANDING_DIR, help="where CDC files land")
    parser.add_argument(
        "--no-person-accounts",
        dest="person_accounts",
        action="store_const",
        const=False,
        default=None,
        help="build a new org without Person Accounts (Account.Name plain text; an existing org keeps its kind)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the org over HTTPS until interrupted")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    serve.add_argument("--token", default="dev-token", help="the bearer token clients must send")
    serve.add_argument("--daily-request-limit", type=int, default=1_000_000)
    serve.add_argument("--cdc-objects", help="comma-separated objects with CDC enabled (default: all)")
    serve.add_argument("--roll-seconds", type=float, default=2.0, help="publish the open CDC file after this age")
    serve.add_argument("--gap-fraction", type=float, default=0.0)
    serve.add_argument("--overflow-threshold", type=int, default=100_000)
    serve.add_argument("--duplicate-file-fraction", type=float, default=0.0)
    serve.add_argument("--late-file-fraction", type=float, default=0.0)
    serve.add_argument(
        "--diff-over-chars",
        type=int,
        default=SALESFORCE_DIFF_OVER_CHARS,
        help="send long text updates as unified diffs when both values have this many characters "
        "(default: Salesforce's 1000; 0 never sends diffs)",
    )
    serve.add_argument(
        "--diff-corrupt-fraction",
        type=float,
        default=0.0,
        help="fraction of those diffs sent with a wrong hash or against another base",
    )
    serve.add_argument(
        "--pubsub-port",
        type=int,
        default=None,
        help="also serve the Pub/Sub API (gRPC, TLS) on this port (0: any free port)",
    )
    serve.add_argument(
        "--no-landing",
        action="store_true",
        help="write no landing files (a subscriber lands the Pub/Sub events instead)",
    )

    generate = commands.add_parser("generate", help="build an org and/or make changes")
    generate.add_argument("--accounts", type=int, default=0, help="build an org with this many accounts first")
    generate.add_argument("--changes", type=int, default=1000, help="number of change transactions")
    generate.add_argument("--rate", type=float, default=None, help="changes per second (default: as fast as possible)")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument(
        "--long-text", action="store_true", help="long multi-line Descriptions, and small edits of them in the mix"
    )
    generate.add_argument("--instance-url", help="drive this org over REST (default: the one in serve.json)")
    generate.add_argument("--token", default=None)
    generate.add_argument("--ca-file", default=None)
    return parser


def serve(args: argparse.Namespace) -> int:
    faults = FaultConfig(
        gap_fraction=args.gap_fraction,
        overflow_threshold=args.overflow_threshold,
        duplicate_file_fraction=args.duplicate_file_fraction,
        late_file_fraction=args.late_file_fraction,
        diff_over_chars=args.diff_over_chars or None,
        diff_corrupt_fraction=args.diff_corrupt_fraction,
    )
    objects = [o.strip() for o in args.cdc_objects.split(",")] if args.cdc_objects else None
    pubsub = args.pubsub_port is not None
    emu = Emulator(
        args.data_dir,
        landing_dir=None if args.no_landing else args.landing_dir,
        port=args.port,
        token=args.token,
        daily_request_limit=args.daily_request_limit,
        cdc_objects=objects,
        faults=faults,
        roll_seconds=args.roll_seconds,
        pubsub=pubsub,
        pubsub_port=args.pubsub_port or 0,
        person_accounts=args.person_accounts,
    )
    emu.start()
    info = args.data_dir / "serve.json"
    info.write_text(
        json.dumps(
            {
                "instance_url": emu.instance_url,
                "ca_file": str(Path(emu.ca_file).resolve()),
                "token": emu.token,
                "landing_dir": str(args.landing_dir.resolve()),
                "pubsub_endpoint": emu.pubsub_address if pubsub else None,
            }
        )
    )
    print(
        f"Salesforce emulator serving {emu.instance_url}  (landing zone: "
        f"{'none' if args.no_landing else args.landing_dir})"
    )
    if pubsub:
        print(f"  export SF_PUBSUB_ENDPOINT={emu.pubsub_address}   (Pub/Sub API)")
    print(f"  export SF_INSTANCE_URL={emu.instance_url}")
    print(f"  export SF_ACCESS_TOKEN={emu.token}")
    print(f"  export SF_CA_BUNDLE={Path(emu.ca_file).resolve()}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: background jobs start with it ignored
        signal.signal(signum, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        info.unlink(missing_ok=True)
        emu.stop()
        print("stopped; pending CDC events published")
    return 0


def generate(args: argparse.Namespace) -> int:
    from salesforce_emulator.client import CaPinnedSession
    from salesforce_emulator.workload import Workload

    info_file = args.data_dir / "serve.json"
    info = json.loads(info_file.read_text()) if info_file.exists() and not args.instance_url else {}
    instance_url = args.instance_url or info.get("instance_url")
    started = time.monotonic()
    if instance_url:
        from simple_salesforce import Salesforce

        sf = Salesforce(
            instance_url=instance_url,
            session_id=args.token or info.get("token", "dev-token"),
            session=CaPinnedSession(args.ca_file or info.get("ca_file") or True),
            version="59.0",
        )
        print(f"generating through the REST API of {instance_url}")
        stats = _drive(Workload(sf, seed=args.seed, long_text=args.long_text), args)
    else:
        with Emulator(args.data_dir, landing_dir=args.landing_dir, person_accounts=args.person_accounts) as emu:
            print(f"generating straight into {args.data_dir} (events to {args.landing_dir})")
            stats = _drive(Workload(emu, seed=args.seed, long_text=args.long_text), args)
    print(json.dumps({**stats, "seconds": round(time.monotonic() - started, 1)}, indent=1))
    return 0


def _drive(workload, args: argparse.Namespace) -> dict[str, int]:  # type: ignore[no-untyped-def]
    stats: dict[str, int] = {}
    if args.accounts:
        stats.update({f"built_{k}": v for k, v in workload.build_org(accounts=args.accounts).items()})
    if args.changes:
        stats.update(workload.run(changes=args.changes, rate=args.rate))
    return stats


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return serve(args) if args.command == "serve" else generate(args)


if __name__ == "__main__":
    sys.exit(main())
