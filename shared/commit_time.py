"""How late a change's commit time may be, written once for the subscriber (cdc_subscriber/header.py, before it
lands an event) and the parse (spark_ops/parse.py, before a landed line becomes a change row).

A commit time is when the org committed the change, so it cannot lie ahead of the clock; an org's clock may run a
little ahead of this machine's, never by a day (`CLOCK_AHEAD_MS`). A later one is a writer's error (microseconds or
nanoseconds written as milliseconds) or a forgery: applied, it would win over every real change of its records until
that date (changes apply in commit order), so both sides refuse it, the subscriber as a dead letter, ingest as a
quarantined line (replication/ingest.py `refuse_future_commits`, on the parsed rows in Arrow: a bound that moves
with the clock inside the Spark query would be a new literal, hence newly compiled code, every run).
"""

from __future__ import annotations

import time

CLOCK_AHEAD_MS = 86_400_000  # a day
LATEST_COMMIT_RULE = "no later than a day after this machine's clock"


def latest_commit_ms(now_ms: int | None = None) -> int:
    """The latest commit time (epoch milliseconds) accepted at `now_ms` (default: now)."""
    return (int(time.time() * 1000) if now_ms is None else now_ms) + CLOCK_AHEAD_MS
