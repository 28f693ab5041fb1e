"""Runs that apply change_events to the replicas apply in the order they were created, even two at a time.

Two landing runs may be in flight at once (dagster.yaml, the tag limit on `.dagster/cdc.files`): the next one
starts (its Python process, its definitions, its ingest) while the one before it still applies and checks. Its
replica steps must still come after the older run's steps of the same replicas, for a replica's commits to follow
the runs' cuts in order (`cdc_assets/closure.py`: each run applies through its own cut, decided by its first
replica step) and its history and changefeed to see them in that order. The pools alone (one writer per table) do
not order two runs' steps, so a landing run's ingest step, once it has committed and recorded its
materializations, waits here until every older apply run in flight (landing, close, catch-up: `cdc/mode` apply)
has ended its steps of the replicas this run also applies. Only the replica steps: an older run's checks run beside
this run's replicas (a check reads the table as it is then, and Dagster records it against the latest
materialization, which is that table's).

Why the ingest step. It holds no replica pool, so an older run never waits for it (a wait in a replica step would
hold that replica's pool, which an older run that has not reached its step of that replica yet would wait for:
a deadlock); its pool, `change_events`, is one the older runs no longer need, except an older run that has not
ingested yet, which is not waited for: it ingests after this one, so its cut includes this run's and the order is
theirs to keep. A run whose worker died stays in flight until run_liveness_sensor ends it (every 15 s), so the wait
is bounded by that.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import dagster as dg

from cdc_assets.actions import APPLY
from cdc_assets.names import CHANGE_EVENTS_KEY, IN_FLIGHT, TAG_MODE, replica_key

POLL_SECONDS = 0.25  # the ingest step's wait is part of a change's latency: look often (two indexed queries)
LOG_EVERY_SECONDS = 60.0


def step_key(key: dg.AssetKey) -> str:
    return key.to_python_identifier()


def unfinished_steps(instance: dg.DagsterInstance, run: dg.DagsterRun, replicas: Iterable[str]) -> list[str]:
    """Of `replicas`, those whose step in the older apply `run` has not ended (it has not started, or runs); none
    when `run` ended, does not select them, or has not ingested yet (it comes after the asking run)."""
    current = instance.get_run_by_id(run.run_id)
    if current is None or current.is_finished:
        return []
    selection = set(current.asset_selection or ())
    names = [n for n in replicas if replica_key(n) in selection]
    if not names:
        return []
    keys = {step_key(replica_key(n)): n for n in names}
    ingest = step_key(CHANGE_EVENTS_KEY) if CHANGE_EVENTS_KEY in selection else None
    ended = {
        s.step_key
        for s in instance.get_run_step_stats(current.run_id, step_keys=[*keys, *([ingest] if ingest else [])])
        if s.end_time is not None
    }
    if ingest and ingest not in ended:
        return []
    return sorted(n for k, n in keys.items() if k not in ended)


def older_apply_runs(instance: dg.DagsterInstance, run_id: str) -> list[dg.DagsterRun]:
    """Apply runs in flight created before `run_id`, oldest first."""
    record = instance.get_run_record_by_id(run_id)
    if record is None:
        return []
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=IN_FLIGHT, tags={TAG_MODE: APPLY.name}, created_before=record.create_timestamp)
    )
    return [r.dagster_run for r in sorted(records, key=lambda r: r.create_timestamp) if r.dagster_run.run_id != run_id]


def wait_for_older_runs(
    instance: dg.DagsterInstance, run_id: str, replicas: Iterable[str], log: dg.DagsterLogManager
) -> float:
    """Wait until no older apply run in flight has a step of `replicas` left (module docstring); the seconds
    waited."""
    replicas = sorted(set(replicas))
    if not replicas:
        return 0.0
    started = time.monotonic()
    told_at = None
    while True:
        waiting = {
            r.run_id: steps
            for r in older_apply_runs(instance, run_id)
            if (steps := unfinished_steps(instance, r, replicas))
        }
        if not waiting:
            waited = time.monotonic() - started
            if told_at is not None:
                log.info(f"The older runs applied their replicas; waited {waited:.1f} s")
            return waited
        now = time.monotonic()
        if told_at is None or now - told_at >= LOG_EVERY_SECONDS:
            told_at = now
            log.info(
                "Waiting for older runs to apply these replicas first: "
                + "; ".join(f"run {r[:8]}: {', '.join(steps)}" for r, steps in waiting.items())
            )
        time.sleep(POLL_SECONDS)
