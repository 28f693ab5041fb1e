"""A person's ask for a run action on some objects, from the UI, and the runs that carry it.

The jobs `resync_objects`, `reconcile_objects` and `describe_objects` (cdc_assets/operate/jobs.py, config
`objects: [Account]`) run no replica themselves: each records its ask in the instance's key-value store, one entry
per object (`cdc/asked.<Name>`: the action, when, and the run that asked), and the reconciliation sensor starts
one run of the asked replicas in that mode at its next tick (sensors/reconciliation.py). One job per action,
whatever the number of objects: a job per object and action was thousands of job snapshots in the code location
at a thousand objects (bench/RESULTS.md, "A thousand objects").

The sensor starting the run, rather than the job, keeps every replica run what the sensors expect: tagged with the
objects it includes and the work it does (cdc_assets/names.py), so no sensor asks for that work again meanwhile;
held back while the org's daily API budget is nearly spent; never for a paused object (an ask waits for the
resume). The sensor's cursor keeps, per object, the ask it last started a run for; a newer ask of the same object
replaces an older one not started yet. The run's key names the job run that asked, so a tick evaluated again, or a
cursor reset, never starts the same ask twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import dagster as dg

ASKED_PREFIX = "cdc/asked."


@dataclass(frozen=True)
class Ask:
    action: str  # a name of cdc_assets/actions.py ACTIONS
    at: str  # ISO 8601 instant the ask was made (its identity, with `by`)
    by: str  # the run id of the job run that asked


def record_asks(instance: dg.DagsterInstance, names: list[str], ask: Ask) -> None:
    # One key per call: the SQL storages' upsert of several keys at once skips the new ones when one exists.
    for name in names:
        instance.run_storage.set_cursor_values({ASKED_PREFIX + name: json.dumps(asdict(ask))})


def asks_of(instance: dg.DagsterInstance, names: list[str]) -> dict[str, Ask]:
    """The latest ask of each of `names` that has one (one query)."""
    values = instance.run_storage.get_cursor_values({ASKED_PREFIX + n for n in names})
    return {n: Ask(**json.loads(values[ASKED_PREFIX + n])) for n in names if values.get(ASKED_PREFIX + n)}
