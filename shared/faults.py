"""Named fault-injection points, for crash tests and the fault suite.

`CDC_FAULT_POINT=<name>` makes the named point fail: `CDC_FAULT_ACTION=raise` (default) raises, `kill` sends
SIGKILL to this process (a real crash: no cleanup, no finally blocks). `CDC_FAULT_SKIP=<n>` lets the point pass its
first n times in this process: a run over several objects fails at the second object's point, not the first's.
Unset, a point costs one dict lookup.

A fault at a point is the environment failing (a crash, a lost connection): ingest never blames a file for it. A
fault carried by the data (`data_fault_point`) is a file whose content breaks ingest: `CDC_FAULT_MARKER=<text>` makes
such a point fail (`InjectedDataFault`) for any batch holding a line with that text, and for no other, whatever else
the batch holds (replication/ingest.py isolates that file); a crash point may be set beside it.
"""

from __future__ import annotations

import os
import signal

import pyarrow as pa
import pyarrow.compute as pc

# Every point, in run order (a crash test asserts it covers them all, and that no `fault_point` call names another).
INGEST_POINTS = (
    "ingest.after_read",
    "ingest.after_parse",
    "ingest.after_quarantine",
    "ingest.after_dedup",
    "ingest.before_commit",
    "ingest.after_commit",
)
APPLY_POINTS = (
    "replica.after_read_changes",
    "replica.after_read_current",
    "replica.after_fold",
    "replica.before_commit",
    "replica.after_commit",
)
RECONCILE_POINTS = (
    "reconcile.after_dirty_read",
    "reconcile.after_retrieve",
    "reconcile.after_query_all",
    "reconcile.after_fold",
    "reconcile.before_commit",
    "reconcile.after_commit",
)
RESYNC_POINTS = (
    "resync.before_commit",
    "resync.after_first_page",
    "resync.after_snapshot_stream",
    "resync.after_missing_marked_deleted",
    "resync.after_commit",
    "resync.after_stage_batch",
)
POLL_POINTS = ("poll.after_rest_commit", "poll.after_page_commit", "poll.after_id_compare")
CHANGEFEED_POINTS = ("changefeed.before_rename", "changefeed.after_rename")
# An apply's versions staged, then each history commit of a catch-up (replication/history/).
HISTORY_POINTS = ("history.after_stage", "history.before_commit", "history.after_commit")
FORMULA_POINTS = ("formulas.before_commit", "formulas.after_batch_commit", "formulas.after_commit")
FAULT_POINTS = (
    INGEST_POINTS
    + APPLY_POINTS
    + RECONCILE_POINTS
    + RESYNC_POINTS
    + POLL_POINTS
    + CHANGEFEED_POINTS
    + HISTORY_POINTS
    + FORMULA_POINTS
)


# Faults carried by the data (`data_fault_point`): raised, or killed by the file (not a point of the run's, so not above).
DATA_POINTS = ("ingest.poisoned_line",)


class InjectedFault(RuntimeError):
    pass


class InjectedDataFault(ValueError):
    """What a line that breaks ingest raises (`data_fault_point`): a fault of the file, not of the environment."""


_passed: dict[str, int] = {}  # times each armed point was reached and let pass (CDC_FAULT_SKIP)


def fault_point(name: str) -> None:
    if os.environ.get("CDC_FAULT_POINT") != name:
        return
    reached = _passed.get(name, 0)
    if reached < int(os.environ.get("CDC_FAULT_SKIP", "0")):
        _passed[name] = reached + 1
        return
    if os.environ.get("CDC_FAULT_ACTION", "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"fault injected at {name} (CDC_FAULT_POINT)")


def data_fault_point(name: str, lines: pa.ChunkedArray | pa.Array) -> None:
    """Fail if one of `lines` (Arrow strings) holds the text `CDC_FAULT_MARKER` (module docstring): raise, or with
    `CDC_FAULT_ACTION=kill` and no `CDC_FAULT_POINT`, SIGKILL this process (a file that kills the run: out of
    memory, a crash in a native reader)."""
    marker = os.environ.get("CDC_FAULT_MARKER")
    if not marker:
        return
    if pc.any(pc.match_substring(lines, marker)).as_py():
        if os.environ.get("CDC_FAULT_ACTION") == "kill" and not os.environ.get("CDC_FAULT_POINT"):
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedDataFault(f"fault injected at {name}: a line holds the text {marker!r} (CDC_FAULT_MARKER)")
