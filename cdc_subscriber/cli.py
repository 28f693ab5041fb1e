"""``python -m cdc_subscriber subscribe | status | dead-letters``.

``subscribe`` streams change events from the org (``SF_*`` variables, as for Dagster; ``SF_PUBSUB_ENDPOINT`` is
the Pub/Sub API, ``api.pubsub.salesforce.com:7443`` by default) into the landing zone (``CDC_LANDING_ZONE``) until
SIGTERM/SIGINT, one stream per topic: ``/data/ChangeEvents`` by default, or ``--per-object`` for one
``/data/<Object>ChangeEvent`` channel per CDC object of ``replication.yaml``. Only objects in ``source: cdc`` (the
default) are subscribed to and named by resync markers: a ``source: poll`` object has no change events to follow
(CDC may not even be enabled for it in the org) and its replica is kept by polling, so a marker would resync it
for nothing. State (positions, status, dead letters) lives in ``<landing zone>-subscriber`` unless
``--state-dir`` says otherwise. ``status`` prints every stream's status; ``dead-letters`` lists the events that
could not be decoded (``--ack`` acknowledges them, which clears Dagster's ``subscriber_no_dead_letters`` check).

Where state lives, so that the README's bare commands answer about the running service: ``--state-dir``, else
``CDC_SUBSCRIBER_STATE`` (as the Dagster sensor reads it), else ``<landing zone>-subscriber``
with the landing zone from ``--landing-dir``, else ``CDC_LANDING_ZONE``, else ``landing``; when none of these is set
and ``./landing`` does not exist, the demo's (``.demo/landing`` of ``make run``, ``.org/landing`` of ``make
run-org``; the one whose subscriber wrote last), said on stderr.
``subscribe`` never guesses: it lands where it is told, ``landing`` by default.

The state folder is beside the landing zone, never inside it: whoever may write the zone (every subscriber of any
tool, the contract allows it) must not be able to forge a stream's position, status or acknowledgements. On a local
disk it is created 0700 and its files 0600; on an object store, give landing writers the zone's prefix only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from cdc_subscriber.position import topic_slug
from cdc_subscriber.service import ALL_CHANGES, Subscriber, SubscriberConfig
from resources.storage import keep_private
from shared.subscriber_state import acknowledge, location, read_statuses, scan, state_dir_for

DEFAULT_ENDPOINT = "api.pubsub.salesforce.com:7443"
DEFAULT_LANDING = Path("landing")
# Where `make run` (python -m demo) and `make run-org` (python -m demo --org) land, from the repository root.
DEMO_LANDINGS = (Path(".demo/landing"), Path(".org/landing"))


def default_landing_dir(command: str) -> Path | str:
    """The landing zone when --landing-dir is not given (module docstring: the demo's, for the read commands)."""
    if zone := os.environ.get("CDC_LANDING_ZONE"):
        return location(zone)
    started = [p for p in DEMO_LANDINGS if state_dir_for(p).exists()]
    if command != "subscribe" and not DEFAULT_LANDING.exists() and started:
        newest = max(started, key=lambda p: state_dir_for(p).stat().st_mtime)
        print(
            f"(reading the demo's landing zone {newest}; set CDC_LANDING_ZONE or --landing-dir for another)",
            file=sys.stderr,
        )
        return newest
    return DEFAULT_LANDING


def _state_from_env() -> Path | str | None:
    """CDC_SUBSCRIBER_STATE: where the subscriber keeps its state and the sensor and these commands read it."""
    state = os.environ.get("CDC_SUBSCRIBER_STATE")
    return location(state) if state else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cdc_subscriber", description="Salesforce Pub/Sub API change events -> landing zone files."
    )
    parser.add_argument(
        "--landing-dir",
        type=location,
        default=None,
        help="a folder or an object-store URI (s3://bucket/landing); default: CDC_LANDING_ZONE, else "
        "landing (status, dead-letters: else .demo/landing)",
    )
    parser.add_argument(
        "--state-dir",
        type=location,
        default=None,
        help="default: CDC_SUBSCRIBER_STATE, else <landing-dir>-subscriber (beside the zone)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("subscribe", help="stream change events into the landing zone until stopped")
    sub.add_argument("--endpoint", default=os.environ.get("SF_PUBSUB_ENDPOINT", DEFAULT_ENDPOINT))
    sub.add_argument(
        "--config",
        default=os.environ.get("CDC_CONFIG", "replication.yaml"),
        help="replication.yaml: its source: cdc objects are the ones a resync marker names (and the "
        "--per-object channels)",
    )
    sub.add_argument("--topic", action="append", help=f"a channel (repeatable; default {ALL_CHANGES})")
    sub.add_argument(
        "--per-object", action="store_true", help="one /data/<Object>ChangeEvent stream per source: cdc object"
    )
    sub.add_argument(
        "--initial-replay",
        choices=("LATEST", "EARLIEST"),
        default="LATEST",
        help="where a stream with no saved position starts",
    )
    sub.add_argument("--tenant-id", default=os.environ.get("SF_TENANT_ID"))
    sub.add_argument("--roll-seconds", type=float, default=2.0, help="land the open file after this age")
    sub.add_argument("--roll-bytes", type=int, default=8 << 20, help="land the open file at this size")
    sub.add_argument(
        "--spool-dir",
        type=Path,
        default=None,
        help="local folder for the open file when the landing zone is on an object store",
    )
    sub.add_argument(
        "--keepalive-timeout",
        type=float,
        default=300.0,
        help="reconnect when not even a keepalive came for this long (Salesforce sends one in 270 s)",
    )
    status = commands.add_parser("status", help="print each stream's status")
    status.add_argument("--json", action="store_true")
    letters = commands.add_parser("dead-letters", help="list the events that could not be decoded")
    letters.add_argument(
        "--ack",
        action="store_true",
        help="acknowledge every dead letter listed (the subscriber_no_dead_letters check passes)",
    )
    letters.add_argument("--json", action="store_true")
    return parser


def cdc_entities(config_path: str | Path) -> tuple[str, ...]:
    """The objects of replication.yaml that follow CDC (``source: cdc``, the default); none without the file."""
    from replication.config import CDC_SOURCE, load_config

    if not Path(config_path).exists():
        return ()
    return tuple(o.name for o in load_config(config_path).objects if o.source == CDC_SOURCE)


def subscribe(args: argparse.Namespace, state_dir: Path | str) -> int:
    from resources.salesforce import salesforce_resource_from_env

    subscribers: list[Subscriber] = []
    stopping = threading.Event()

    def stop(*_: object) -> None:
        stopping.set()
        for s in subscribers:
            s.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):  # first: a signal during start-up stops cleanly too
        signal.signal(signum, stop)
    entities = cdc_entities(args.config)
    if args.per_object and not args.topic and not entities:
        print(
            f"--per-object: {args.config} lists no source: cdc object to subscribe to; list objects there (or "
            "pass --topic)",
            file=sys.stderr,
        )
        return 2
    topics = args.topic or ([f"/data/{name}ChangeEvent" for name in entities] if args.per_object else [ALL_CHANGES])
    for topic in topics:
        try:
            topic_slug(topic)
        except ValueError as exc:
            print(f"cannot subscribe: {exc}", file=sys.stderr)
            return 2
    for topic in topics:
        salesforce = salesforce_resource_from_env(resolved=True)
        config = SubscriberConfig(
            landing_dir=args.landing_dir,
            state_dir=state_dir,
            endpoint=args.endpoint,
            topic=topic,
            entities=entities,
            initial_replay=args.initial_replay,
            ca_file=salesforce.ca_bundle,
            tenant_id=args.tenant_id,
            roll_bytes=args.roll_bytes,
            roll_seconds=args.roll_seconds,
            keepalive_timeout=args.keepalive_timeout,
            spool_dir=args.spool_dir and args.spool_dir / topic_slug(topic),
        )
        subscribers.append(Subscriber(config, salesforce))
        if stopping.is_set():
            subscribers[-1].stop()
    results: dict[str, str] = {}
    threads = [
        threading.Thread(target=lambda s=s: results.__setitem__(s.config.topic, s.run()), name=s.config.topic)
        for s in subscribers
    ]
    for thread in threads:
        thread.start()
    print(f"subscribed to {', '.join(topics)} at {args.endpoint}; landing in {args.landing_dir}", flush=True)
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(timeout=0.5)
    return 1 if "FAILED_PERMANENTLY" in results.values() else 0


def show_status(args: argparse.Namespace, state_dir: Path | str) -> int:
    statuses = read_statuses(state_dir)
    now = dt.datetime.now(dt.UTC)
    if args.json:
        print(json.dumps([asdict(s) | {"state": s.effective_state(now)} for s in statuses], indent=1))
        return 0
    if not statuses:
        print(f"NOT_STARTED: no subscriber has reported in {state_dir}")
        return 0
    for s in statuses:
        lag = "-" if s.lag_seconds is None else f"{s.lag_seconds:.1f}s"
        print(
            f"{s.topic}: {s.effective_state(now)}  replay id {s.last_replay_id}  {s.events_per_second} events/s  "
            f"lag {lag}  landed {s.events_landed} events in {s.files_landed} files  resyncs {s.resyncs}  "
            f"dead letters {s.dead_letters}  updated {s.updated_at}"
        )
        if s.last_replay_id is None and s.last_replay_id_hex:
            print(f"  replay id (opaque bytes, hex) {s.last_replay_id_hex}")
        if s.last_dead_letter:
            print(f"  last dead letter at {s.last_dead_letter_at}: {s.last_dead_letter}")
        if s.last_error:
            print(f"  last error at {s.last_error_at}: {s.last_error}")
    return 0


def show_dead_letters(args: argparse.Namespace, state_dir: Path | str) -> int:
    found = scan(state_dir)
    open_ = {x.key for x in found.waiting}
    if args.json:
        print(json.dumps([asdict(x) | {"acknowledged": x.key not in open_} for x in found.letters], indent=1))
    for x in [] if args.json else found.letters:
        mark = "" if x.key in open_ else " (acknowledged)"
        print(
            f"{x.recorded_at} {x.topic} replay id {x.replay_id} schema {x.schema_id} entity {x.entity}{mark}\n"
            f"  reason: {x.reason}\n  done: {x.action}\n  payload ({len(x.payload)} base64 chars) in "
            f"{state_dir}/dead_letters-<topic>/{x.replay_id}.json"
        )
    notes = sys.stderr if args.json else sys.stdout
    if found.dropped:
        print(
            f"{found.dropped} more dead letter(s) were not kept (a topic's store held its maximum), "
            f"{found.dropped_waiting} not acknowledged: the last one's reason is in {state_dir}/dead_letters-*/"
            "_dropped.json",
            file=notes,
        )
    for path in found.unreadable:
        print(f"{path} is not a dead letter (skipped): look at it, then remove it", file=notes)
    if args.ack:
        done = acknowledge(state_dir)
        print(
            f"acknowledged {len(done)} dead letter(s)"
            + (f" and {found.dropped_waiting} not kept" if found.dropped_waiting else ""),
            file=notes,
        )
    elif not args.json:
        waiting = len(open_) + found.dropped_waiting
        print(
            f"{len(found.letters) + found.dropped} dead letter(s), {waiting} not acknowledged"
            + ("; acknowledge with: python -m cdc_subscriber dead-letters --ack" if waiting else "")
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Its own files are created 0600 already; the umask keeps private what is written without that care.
    keep_private()
    args.landing_dir = args.landing_dir or default_landing_dir(args.command)
    state_dir = args.state_dir or _state_from_env() or state_dir_for(args.landing_dir)
    commands = {"subscribe": subscribe, "status": show_status, "dead-letters": show_dead_letters}
    return commands[args.command](args, state_dir)


if __name__ == "__main__":
    sys.exit(main())
