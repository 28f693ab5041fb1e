"""The subscriber's state folder as its readers see it: where it is, each stream's status, the dead letters.

The CDC subscriber (cdc_subscriber/, a service without Spark or Dagster) writes its state beside the landing zone;
Dagster's checks and sensors (cdc_assets/landing_checks.py, sensors/subscriber_status.py) and the subscriber's own
`status` and `dead-letters` commands read it. What both sides need of it is here, so neither imports the other:

- **where**: ``state_dir_for`` (``<landing zone>-subscriber``, beside the zone and never inside it: whoever may write
  the zone must not be able to forge a stream's position, status or acknowledgements) and ``location``;
- **stream status**: ``StreamStatus`` as each stream writes it (``status-<topic>.json``; its writer is
  cdc_subscriber/status.py ``StatusReporter``) and ``read_statuses``; a status older than ``STALE_AFTER_SECONDS``
  comes from a subscriber that is no longer running, and reads as FAILED;
- **dead letters**: ``DeadLetter``, one file per letter in ``dead_letters-<topic>/`` (written by
  cdc_subscriber/dead_letters.py ``DeadLetterStore``, which says what they are), ``scan`` and ``acknowledge``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, overload

from resources.storage import Folder, is_uri, join

log = logging.getLogger(__name__)

STATE_SUFFIX = "-subscriber"  # the state folder's name: the landing zone's, with this suffix, beside it
STATES = ("NOT_STARTED", "STARTING", "RUNNING", "DRAINING", "PAUSED", "FAILED", "FAILED_PERMANENTLY")
STALE_AFTER_SECONDS = 30.0
ACKNOWLEDGED_FILE = "dead_letters_acknowledged.json"
FOLDER_PREFIX = "dead_letters-"
DROPPED_FILE = "_dropped.json"


def location(text: str) -> Path | str:
    """A folder given on the command line or in a variable: a local Path, or an object-store URI kept as text
    (a Path would fold `s3://bucket` into `s3:/bucket`)."""
    return text if is_uri(text) else Path(text)


@overload
def state_dir_for(landing_dir: Path) -> Path: ...  # a Path is never a URI: it folds `s3://` into `s3:/`
@overload
def state_dir_for(landing_dir: Path | str) -> Path | str: ...
def state_dir_for(landing_dir: Path | str) -> Path | str:
    """The default state folder of a landing zone: ``<zone>-subscriber`` beside it (``.demo/landing`` ->
    ``.demo/landing-subscriber``, ``s3://bucket/cdc/landing`` -> ``s3://bucket/cdc/landing-subscriber``)."""
    if is_uri(landing_dir):
        zone = str(landing_dir).rstrip("/")
        if "/" not in zone.split("://", 1)[1]:
            raise ValueError(
                f"the landing zone {landing_dir} is a whole bucket: there is no folder beside it for the "
                "subscriber's state; set CDC_SUBSCRIBER_STATE (or --state-dir) to another prefix"
            )
        return zone + STATE_SUFFIX
    zone_path = Path(landing_dir)
    if zone_path.name in ("", ".", ".."):
        zone_path = zone_path.resolve()
    if not zone_path.name:
        raise ValueError(
            f"the landing zone {landing_dir} is a file system root: set CDC_SUBSCRIBER_STATE (or --state-dir)"
        )
    return zone_path.with_name(zone_path.name + STATE_SUFFIX)


# -- stream status -----------------------------------------------------------------------------------------------------
def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


@dataclass
class StreamStatus:
    topic: str
    state: str = "NOT_STARTED"
    last_replay_id: int | None = None  # the CometD long form; None when the replay id is not 8 bytes
    last_replay_id_hex: str | None = None
    events_landed: int = 0
    files_landed: int = 0
    events_per_second: float = 0.0
    lag_seconds: float | None = None
    newest_commit_ts: int | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    resyncs: int = 0
    dead_letters: int = 0
    last_dead_letter: str | None = None
    last_dead_letter_at: str | None = None
    started_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    pid: int = field(default_factory=os.getpid)

    def effective_state(self, now: dt.datetime | None = None) -> str:
        """The state, or FAILED when a running stream stopped reporting (its process is gone)."""
        now = now or dt.datetime.now(dt.UTC)
        age = (now - dt.datetime.fromisoformat(self.updated_at)).total_seconds()
        if self.state in ("STARTING", "RUNNING", "DRAINING", "FAILED") and age > STALE_AFTER_SECONDS:
            return "FAILED"
        return self.state


def read_statuses(state_dir: str | Path) -> list[StreamStatus]:
    """Every stream's last status in a state folder, a local path or an object-store URI (none: the subscriber
    never ran there)."""
    statuses, folder = [], Folder(state_dir)
    for name in folder.names(prefix="status-", suffix=".json"):
        text = folder.read_text(name)
        try:
            if text is not None:  # None: deleted since the listing
                statuses.append(StreamStatus(**json.loads(text)))
        except (json.JSONDecodeError, TypeError) as exc:  # replaced atomically: only a foreign file can be bad
            log.warning("ignoring %s: not a subscriber status file (%s)", folder.path(name), exc)
    return statuses


# -- dead letters ------------------------------------------------------------------------------------------------------
class Salvaged(Protocol):
    """What was landed in a dead event's place (cdc_subscriber/dead_letters.py `Salvage`)."""

    @property
    def action(self) -> str: ...
    @property
    def entity(self) -> str | None: ...


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    replay_id: str  # hex of the opaque bytes
    schema_id: str
    payload: str  # base64 of the raw Avro payload
    reason: str
    action: str
    entity: str | None = None
    recorded_at: str = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())

    @property
    def key(self) -> str:
        return f"{self.topic} {self.replay_id}"

    @classmethod
    def of(
        cls, topic: str, replay_id: bytes, schema_id: str, payload: bytes, reason: str, found: Salvaged
    ) -> DeadLetter:
        return cls(
            topic, replay_id.hex(), schema_id, base64.b64encode(payload).decode(), reason, found.action, found.entity
        )


def is_letter_file(name: str) -> bool:
    """Not the dropped count (``_``), not the temporary file of a write a crash interrupted (``.``)."""
    return name.endswith(".json") and not name.startswith(("_", ".")) and "/" not in name


def read_dropped(folder: Folder) -> dict[str, Any]:
    text = _read_text(folder, DROPPED_FILE)
    try:
        dropped = json.loads(text) if text is not None else {}
        if isinstance(dropped, dict) and isinstance(dropped.get("dropped", 0), int):
            return dropped
    except json.JSONDecodeError:
        pass
    log.warning("ignoring %s: not a count of dropped dead letters", folder.path(DROPPED_FILE))
    return {}


def _read_text(folder: Folder, name: str) -> str | None:
    try:
        return folder.read_text(name)
    except UnicodeDecodeError:
        return ""


def read_letters(folder: Folder, unreadable: list[str]) -> list[DeadLetter]:
    """The letters of one topic's folder; a file that is not one is logged, added to ``unreadable`` and skipped."""
    letters = []
    for name in filter(is_letter_file, folder.names(suffix=".json")):
        text = _read_text(folder, name)
        if text is None:  # removed since the listing
            continue
        try:
            letters.append(DeadLetter(**json.loads(text)))
            continue
        except (json.JSONDecodeError, TypeError) as exc:
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
        log.warning("skipping %s: not a dead letter (%s); look at it, then remove it", folder.path(name), why)
        unreadable.append(folder.path(name))
    return letters


@dataclass(frozen=True)
class DeadLetters:
    """Every topic's dead letters in a state folder, and what is acknowledged."""

    letters: list[DeadLetter]  # kept, oldest first
    waiting: list[DeadLetter]  # kept, not acknowledged
    dropped: int  # not kept (a store held its maximum), ever
    dropped_waiting: int  # of those, not acknowledged
    unreadable: list[str]  # files in the stores that are not dead letters (skipped)

    @property
    def clean(self) -> bool:
        return not (self.waiting or self.dropped_waiting or self.unreadable)


def scan(state_dir: str | Path) -> DeadLetters:
    """Read every topic's dead letters in a state folder (a local path or an object-store URI); never raises on
    what a file holds."""
    state = Folder(state_dir)
    unreadable: list[str] = []
    letters: list[DeadLetter] = []
    dropped: dict[str, int] = {}
    for name in _letter_folders(state):
        folder = Folder(join(state_dir, name))
        letters += read_letters(folder, unreadable)
        dropped[name] = read_dropped(folder).get("dropped", 0)
    done, done_dropped = _acknowledged(state)
    letters.sort(key=lambda x: str(x.recorded_at))  # str: a hand-edited letter may hold any JSON there
    return DeadLetters(
        letters,
        [x for x in letters if x.key not in done],
        sum(dropped.values()),
        sum(max(0, n - done_dropped.get(name, 0)) for name, n in dropped.items()),
        unreadable,
    )


def _letter_folders(state: Folder) -> list[str]:
    """The names of the topics' letter folders in a state folder."""
    return sorted({path.split("/")[0] for path, _ in state.walk() if "/" in path and path.startswith(FOLDER_PREFIX)})


def read_dead_letters(state_dir: str | Path) -> list[DeadLetter]:
    """Every topic's kept dead letters in a state folder, oldest first."""
    return scan(state_dir).letters


def _acknowledged(state: Folder) -> tuple[set[str], dict[str, int]]:
    """(the keys of the kept letters acknowledged, how many dropped ones per store) as the ack file says."""
    text = _read_text(state, ACKNOWLEDGED_FILE)
    if text is None:
        return set(), {}
    try:
        done = json.loads(text)
        keys, dropped = done.get("acknowledged", []), done.get("dropped", {})
        if isinstance(keys, list) and isinstance(dropped, dict):
            return (
                {k for k in keys if isinstance(k, str)},
                {k: n for k, n in dropped.items() if isinstance(n, int) and not isinstance(n, bool)},
            )
    except (json.JSONDecodeError, AttributeError):  # not JSON, or not an object
        pass
    log.warning(
        "ignoring %s: not a list of acknowledged dead letters (every letter reads as waiting; acknowledge them again)",
        state.path(ACKNOWLEDGED_FILE),
    )
    return set(), {}


def unacknowledged(state_dir: str | Path) -> list[DeadLetter]:
    return scan(state_dir).waiting


def acknowledge(state_dir: str | Path) -> list[DeadLetter]:
    """Acknowledge every dead letter recorded so far (kept and dropped); returns the kept ones newly acknowledged."""
    state, found = Folder(state_dir), scan(state_dir)
    done = sorted(_acknowledged(state)[0] | {x.key for x in found.letters})
    dropped = {name: read_dropped(Folder(join(state_dir, name))).get("dropped", 0) for name in _letter_folders(state)}
    state.write_atomically(ACKNOWLEDGED_FILE, json.dumps({"acknowledged": done, "dropped": dropped}, indent=1))
    return found.waiting
