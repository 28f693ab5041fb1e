"""The checks on `landing_zone`: every entry of the zone is read, the CDC subscriber's streams are healthy, and no
event the subscriber could not decode awaits acknowledgement.

The sensors watching the zone evaluate them as they look (sensors/landing_zone.py when its survey changes,
sensors/subscriber_status.py every 30 s); each also runs on demand.

- `landing_zone_files_read` fails while the zone holds what the platform does not read (resources/landing_zone.py
  `survey`: files that are not `*.jsonl`/`*.jsonl.gz`, symbolic links, FIFOs and devices, names that are not UTF-8,
  in-flight files a dead writer left), naming a few (control characters escaped: a file name may hold a newline),
  each with what to do about it. Nothing removes such an entry (the platform never deletes what it does not read),
  so one planted file fails the check until an operator removes it (docs/operations/runbook.md says how).
- `subscriber_stream_healthy` fails when a stream is ``FAILED`` or ``FAILED_PERMANENTLY`` (or stopped reporting:
  its process is gone) or its lag passes ``subscriber_max_lag_seconds`` (replication.yaml option, default 300).
- `subscriber_no_dead_letters` fails while events the subscriber could not decode (``cdc_subscriber/dead_letters.py``)
  are not acknowledged, naming each one's replay id, schema, entity, reason and what was landed in its place (gap
  lines, so the records were reconciled, or a resync). The stream went on and the replicas were repaired either
  way; the check asks a person to look (usually a bug or a schema change) and to acknowledge with
  ``python -m cdc_subscriber dead-letters --ack``.

A landing zone no subscriber of ours reports to (files dropped by another tool) passes the stream check: nothing to
observe. Several streams (one per channel) add up: the worst state, the largest lag, the summed throughput.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.names import LANDING_ZONE
from replication.config import ReplicationConfig
from resources.landing_zone import LINK, NAME_NOT_UTF8, NOT_EVENTS, SPECIAL, STALE_INFLIGHT, LandingZone, Survey
from resources.printable import printable, printable_list
from shared.subscriber_state import STATES, DeadLetter, StreamStatus, location, read_statuses, scan, state_dir_for

FILES_READ_CHECK = "landing_zone_files_read"
SHOWN = 5  # entries a failing check names
# Observation metadata key -> the reason `survey` gives.
IGNORED_COUNTS = {
    "files_not_events": NOT_EVENTS,
    "symlinks": LINK,
    "not_regular_files": SPECIAL,
    "names_not_utf8": NAME_NOT_UTF8,
    "inflight_stale": STALE_INFLIGHT,
}
# What to do about an entry of each kind, as the failing check says it.
FIXES = {
    NOT_EVENTS: "rename it to *.jsonl or *.jsonl.gz (lower case) if it holds events, else remove it",
    LINK: "remove the link; land the file itself if it holds events",
    SPECIAL: "remove it",
    NAME_NOT_UTF8: "rename it to a UTF-8 name, or remove it (by inode: runbook)",
    STALE_INFLIGHT: "remove it once its writer is gone (our subscriber lands unacknowledged events again)",
}
CHECK_NAME = "subscriber_stream_healthy"
DEAD_LETTERS_CHECK = "subscriber_no_dead_letters"
ACK_COMMAND = "python -m cdc_subscriber dead-letters --ack"
UNHEALTHY = ("FAILED", "FAILED_PERMANENTLY")


def survey_report(survey: Survey, landing: LandingZone) -> tuple[bool, str, dict[str, Any]]:
    """(nothing ignored, description, metadata) of one survey of the zone."""
    metadata: dict[str, Any] = {
        "event_files": dg.MetadataValue.int(len(survey.files)),
        "entries_not_read": dg.MetadataValue.int(len(survey.ignored)),
    }
    metadata |= {key: dg.MetadataValue.int(survey.count(why)) for key, why in IGNORED_COUNTS.items()}
    if not survey.ignored:
        return True, f"every entry of the landing zone is read ({len(survey.files)} event files)", metadata
    shown = "; ".join(f"{printable(i.path, 200)} ({i.why}: {FIXES[i.why]})" for i in survey.ignored[:SHOWN])
    more = f" and {len(survey.ignored) - SHOWN} more" if len(survey.ignored) > SHOWN else ""
    return (
        False,
        (
            f"{len(survey.ignored)} entries of the landing zone {printable(landing.path)} are not read: {shown}{more}. "
            f"Nothing removes them: this check fails until they are gone (runbook, landing_zone_files_read, lists them "
            f"all with find); in-flight means a name starting with _ or . older than "
            f"{landing.inflight_stale_seconds:.0f}s"
        ),
        metadata,
    )


def build_landing_check() -> dg.AssetChecksDefinition:
    """`landing_zone_files_read` on demand (the landing sensor evaluates it too, when its survey changes)."""

    @dg.asset_check(
        asset=LANDING_ZONE,
        name=FILES_READ_CHECK,
        description="Every entry of the landing zone is read: no file with another suffix, no symbolic "
        "link, FIFO or device, no name that is not UTF-8, no in-flight file a dead writer "
        "left.",
    )
    def landing_zone_files_read(landing: LandingZone) -> dg.AssetCheckResult:
        passed, description, metadata = survey_report(landing.survey(), landing)
        return dg.AssetCheckResult(passed=passed, description=description, metadata=metadata)

    return landing_zone_files_read


def state_dir(landing: LandingZone) -> Path | str:
    """CDC_SUBSCRIBER_STATE, else `<landing zone>-subscriber` (either may be an object-store URI)."""
    configured = os.environ.get("CDC_SUBSCRIBER_STATE")
    return location(configured) if configured else state_dir_for(landing.path)


def summarize(
    statuses: list[StreamStatus], max_lag_seconds: float, now: dt.datetime | None = None
) -> tuple[bool, str, dict[str, Any]]:
    """(healthy, description, metadata) of every stream together."""
    now = now or dt.datetime.now(dt.UTC)
    states = {s.topic: s.effective_state(now) for s in statuses}
    worst = max(states.values(), key=lambda state: (state in UNHEALTHY, STATES.index(state)))
    lag = max((s.lag_seconds or 0.0 for s in statuses), default=0.0)
    errors = [printable(f"{s.topic}: {s.last_error} (at {s.last_error_at})", 500) for s in statuses if s.last_error]
    problems = [f"{printable(topic)} is {state}" for topic, state in states.items() if state in UNHEALTHY]
    if lag > max_lag_seconds:
        problems.append(f"lag {lag:.0f}s is over {max_lag_seconds:.0f}s")
    description = (
        ("; ".join(problems) + (f". Last error: {errors[-1]}" if errors else ""))
        if problems
        else (f"{len(statuses)} stream(s) {worst}, lag {lag:.1f}s")
    )
    metadata: dict[str, Any] = {
        "stream_state": dg.MetadataValue.text(worst),
        "lag_seconds": dg.MetadataValue.float(float(lag)),
        "events_per_second": dg.MetadataValue.float(float(sum(s.events_per_second for s in statuses))),
        "events_landed": dg.MetadataValue.int(sum(s.events_landed for s in statuses)),
        "last_replay_id": dg.MetadataValue.int(max((s.last_replay_id or 0 for s in statuses), default=0)),
        "resyncs": dg.MetadataValue.int(sum(s.resyncs for s in statuses)),
        "streams": dg.MetadataValue.json(
            {
                s.topic: {
                    "state": states[s.topic],
                    "lag_seconds": s.lag_seconds,
                    "events_per_second": s.events_per_second,
                    "last_replay_id": s.last_replay_id,
                    "last_replay_id_hex": s.last_replay_id_hex,
                    "dead_letters": s.dead_letters,
                    "last_dead_letter": s.last_dead_letter,
                    "updated_at": s.updated_at,
                }
                for s in statuses
            }
        ),
    }
    if errors:
        metadata["last_error"] = dg.MetadataValue.text(errors[-1])
    return not problems, description, metadata


def dead_letter_report(state: Path | str) -> tuple[bool, str, dict[str, Any]]:
    """(no unacknowledged dead letters, description, metadata) of a subscriber state folder; a file in the
    dead-letter store that is not a letter is skipped and named (it fails the check), never raised."""
    found = scan(state)
    letters, waiting, unacknowledged = found.letters, found.waiting, len(found.waiting) + found.dropped_waiting
    metadata: dict[str, Any] = {
        "dead_letters": dg.MetadataValue.int(len(letters) + found.dropped),
        "dead_letters_unacknowledged": dg.MetadataValue.int(unacknowledged),
        "dead_letters_dropped": dg.MetadataValue.int(found.dropped),
        "dead_letter_files_unreadable": dg.MetadataValue.int(len(found.unreadable)),
    }
    if letters:
        last = letters[-1]
        metadata["last_dead_letter"] = dg.MetadataValue.text(
            printable(f"{last.topic} replay id {last.replay_id}: {last.reason}", 500)
        )
    if found.clean:
        return (
            True,
            f"no dead letters waiting ({len(letters)} acknowledged)" if letters else "no dead letters",
            metadata,
        )
    problems = []
    if unacknowledged:
        shown = "; ".join(_describe(x) for x in waiting[-5:])
        dropped = (
            f"; {found.dropped_waiting} more not kept (the store held its maximum; the last one's reason in "
            f"{state}/dead_letters-*/_dropped.json)"
            if found.dropped_waiting
            else ""
        )
        problems.append(
            f"{unacknowledged} event(s) could not be landed and were recorded as dead letters "
            f"({shown}{dropped}). Their records were marked dirty or their objects resynced, so the replicas catch "
            f"up; find the cause (raw payloads in {state}/dead_letters-*/), then acknowledge with `{ACK_COMMAND}`"
        )
    if found.unreadable:
        problems.append(
            f"{len(found.unreadable)} file(s) in the dead-letter store are not dead letters and were "
            f"skipped ({', '.join(printable_list(found.unreadable))}): look at them, then remove them"
        )
    return False, ". ".join(problems), metadata


def _describe(letter: DeadLetter) -> str:
    return printable(
        f"{letter.topic} replay id {letter.replay_id}, schema {letter.schema_id}, entity "
        f"{letter.entity or 'unknown'}: {letter.reason}; {letter.action}",
        500,
    )


def _max_lag(replication: ReplicationConfig) -> float:
    return replication.options.subscriber_max_lag_seconds


def build_subscriber_check(*, replication: ReplicationConfig) -> dg.AssetChecksDefinition:
    max_lag = _max_lag(replication)

    specs = [
        dg.AssetCheckSpec(
            CHECK_NAME,
            asset=LANDING_ZONE,
            description=f"The CDC subscriber streams: not FAILED, lag under {max_lag:.0f}s.",
        ),
        dg.AssetCheckSpec(
            DEAD_LETTERS_CHECK,
            asset=LANDING_ZONE,
            description=f"No event the CDC subscriber could not decode awaits acknowledgement (`{ACK_COMMAND}`).",
        ),
    ]

    @dg.multi_asset_check(specs=specs, name="subscriber_checks", can_subset=True)
    def subscriber_checks(context, landing: LandingZone):
        selected = {k.name for k in context.selected_asset_check_keys}
        if CHECK_NAME in selected:
            yield _stream_check(landing)
        if DEAD_LETTERS_CHECK in selected:
            clean, description, metadata = dead_letter_report(state_dir(landing))
            yield dg.AssetCheckResult(
                check_name=DEAD_LETTERS_CHECK, passed=clean, description=description, metadata=metadata
            )

    def _stream_check(landing: LandingZone) -> dg.AssetCheckResult:
        statuses = read_statuses(state_dir(landing))
        if not statuses:
            return dg.AssetCheckResult(
                check_name=CHECK_NAME, passed=True, description="no subscriber of ours reports to this landing zone"
            )
        healthy, description, metadata = summarize(statuses, max_lag)
        return dg.AssetCheckResult(check_name=CHECK_NAME, passed=healthy, description=description, metadata=metadata)

    return subscriber_checks
