"""How late a change's commit time may be, written once for the subscriber (cdc_subscriber/header.py, before it
lands an event) and the parse (spark_ops/parse.py, before a landed line becomes a change row).

A commit time is when the org committed the change, so it cannot lie ahead of the clock; an org's clock may run a
little ahead of this machine's, never by a day (`CLOCK_AHEAD_MS`). A later one is a writer's error (microseconds or
nanoseconds written as milliseconds) or a forgery: applied, it would win over every real change of its records until
that date (changes apply in commit order), so both sides refuse it, the subscriber as a dead letter, the parse as a
quarantined line. The bound is *now* plus a day wherever it is checked: in Python `latest_commit_ms()`, in Spark
SQL `LATEST_COMMIT_SQL` (`current_timestamp()` is fixed once per query, so one ingest applies one bound to all its
lines, and the query's text, hence its compiled code, is the same every run).
"""

from __future__ import annotations

import time

CLOCK_AHEAD_MS = 86_400_000  # a day
LATEST_COMMIT_SQL = f"(unix_millis(current_timestamp()) + {CLOCK_AHEAD_MS})"
LATEST_COMMIT_RULE = "no later than a day after this machine's clock"


def latest_commit_ms(now_ms: int | None = None) -> int:
    """The latest commit time (epoch milliseconds) accepted at `now_ms` (default: now)."""
    return (int(time.time() * 1000) if now_ms is None else now_ms) + CLOCK_AHEAD_MS
