"""Named fault-injection points, for crash tests and the fault suite.

`CDC_FAULT_POINT=<name>` makes the named point fail: `CDC_FAULT_ACTION=raise` (default) raises, `kill` sends
SIGKILL to this process (a real crash: no cleanup, no finally blocks). Unset, a point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal


# Every point, in run order (a crash test asserts it covers them all, and that no `fault_point` call names another).
INGEST_POINTS = ("ingest.after_read", "ingest.after_parse", "ingest.after_quarantine", "ingest.after_dedup",
                 "ingest.before_commit", "ingest.after_commit")
APPLY_POINTS = ("replica.after_read_changes", "replica.after_read_current", "replica.after_fold",
                "replica.before_commit", "replica.after_commit")
RECONCILE_POINTS = ("reconcile.after_dirty_read", "reconcile.after_retrieve", "reconcile.after_query_all",
                    "reconcile.after_fold", "reconcile.before_commit", "reconcile.after_commit")
RESYNC_POINTS = ("resync.before_commit", "resync.after_first_page", "resync.after_snapshot_stream",
                 "resync.after_missing_marked_deleted", "resync.after_commit", "resync.after_stage_batch")
POLL_POINTS = ("poll.after_rest_commit", "poll.after_page_commit", "poll.after_id_compare")
CHANGEFEED_POINTS = ("changefeed.before_rename", "changefeed.after_rename")
# An apply's versions staged, then each history commit of a catch-up (cdc_assets/history/).
HISTORY_POINTS = ("history.after_stage", "history.before_commit", "history.after_commit")
FORMULA_POINTS = ("formulas.before_commit", "formulas.after_batch_commit", "formulas.after_commit")
FAULT_POINTS = (INGEST_POINTS + APPLY_POINTS + RECONCILE_POINTS + RESYNC_POINTS + POLL_POINTS + CHANGEFEED_POINTS
                + HISTORY_POINTS + FORMULA_POINTS)


class InjectedFault(RuntimeError):
    pass


def fault_point(name: str) -> None:
    if os.environ.get("CDC_FAULT_POINT") != name:
        return
    if os.environ.get("CDC_FAULT_ACTION", "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"fault injected at {name} (CDC_FAULT_POINT)")
