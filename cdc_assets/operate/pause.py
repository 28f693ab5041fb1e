"""Pausing replication of one object: a flag in the Dagster instance that the sensors honour.

The flag lives in the instance's key-value store (`cdc/paused.<Name>`), where every sensor and run of the instance
reads it, set by the jobs `pause_replication` / `resume_replication` (operate.py) from the UI. While an object is
paused nothing of its replica is requested: landing runs leave it out, the reconciliation sensor asks no
reconcile or resync of it, its poll sensor skips. Nothing is lost: events keep landing and are ingested into
change_events (the landing runs still run change_events); the replica's checkpoint stays where it was, so its
rows stay (retention trims nothing above a replica's checkpoint). On resume the landing sensor asks one catch-up
run of the object (run key `resume-<Name>-<resumed at>`), which applies everything ingested meanwhile.

One consequence: a transaction spanning a paused object and another one stays open in the other (the close rule
applies the newest transaction only in a run holding every replica that has rows of it, replication/closure.py)
until a newer transaction closes it or the object is resumed.
"""

from __future__ import annotations

import dagster as dg

PAUSED_PREFIX = "cdc/paused."
RESUMED_PREFIX = "cdc/resumed."


def paused_objects(instance: dg.DagsterInstance, names: list[str]) -> set[str]:
    values = instance.run_storage.get_cursor_values({PAUSED_PREFIX + n for n in names})
    return {n for n in names if values.get(PAUSED_PREFIX + n)}


def set_paused(instance: dg.DagsterInstance, name: str, paused: bool, *, at: str) -> None:
    """Pause (`paused`) or resume `name`; a resume also records when (`at`), for the catch-up run's key."""
    # One key per call: the SQL storages' upsert of several keys at once skips the new ones when one exists.
    instance.run_storage.set_cursor_values({PAUSED_PREFIX + name: at if paused else ""})
    if not paused:
        instance.run_storage.set_cursor_values({RESUMED_PREFIX + name: at})


def resumed_at(instance: dg.DagsterInstance, names: list[str]) -> dict[str, str]:
    """When each of `names` was last resumed (absent: never)."""
    values = instance.run_storage.get_cursor_values({RESUMED_PREFIX + n for n in names})
    return {n: values[RESUMED_PREFIX + n] for n in names if values.get(RESUMED_PREFIX + n)}
