"""A cycle: one sensor asking for a run action on a schedule of each object's own, for every object it serves at
once. Poll (sensors/poll.py), describe (sensors/describe.py) and formula refresh (sensors/formulas.py) are each one
such sensor, whatever the number of objects: a sensor per object would be hundreds of sensors ticking in the
daemon, each querying the instance on its own.

Each object has its windows (n = seconds since the epoch // the object's `every`); the sensor's JSON cursor keeps,
per object, the window it was last asked in. Each tick the cycle takes the objects whose window is due and asks for
one run carrying them all, or a few of at most `per_run` each (a run pays its process start once for all its
objects; their steps run one after the other, each committing on its own). What it skips:
- an object that is paused, or one with a run (any run: its hidden object tag) queued or in flight, found with one
  query of the in-flight runs; neither is written to the cursor, so it is asked again once it can be;
- every object while the org's daily API budget is nearly spent (`api_budget_reserve`), when the action spends it;
- with `first_waits`, an object the cursor does not know yet (the sensor just started, or the object was just
  added): its count starts, and it is asked a window later;
- what `quiet` leaves out (poll: objects with nothing new in the org), written to the cursor as done;
- with `retry_cap`, an object whose last runs ended without materializing it, k in a row (its step failed: a field
  it lost, a Bulk job the org refused, a timeout), until min(every x 2^(k-1), max(every, retry_cap)) after the last
  one ended: its own backoff, whatever the other objects of those runs did (`sensors/work.py` `failed_in_a_row`).
  Not written to the cursor: it is asked once the wait is over. The sensor's log names each object waiting.

The run key names the action, the objects and their windows, so a tick evaluated twice asks for the same runs. A
run's tags and op config are those of its action (`cdc/mode`, an object tag per object, a reason), and its run
priority the cycle's (`dagster/priority`): background work (describe, formula refresh) below the polls and the
landing runs, whose waits are changes' latency. Every object's windows start together, so the hourly describe() of
300 objects is 6 runs at once; at a lower priority a poll run queued behind them goes first (without it, the
cycle it came due in saw its changes' latency nearly double: bench/RESULTS.md, "Polled objects under the real
daemon").
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg
from dagster._core.storage.tags import PRIORITY_TAG

from cdc_assets.actions import Action
from cdc_assets.names import replica_key, run_tags
from cdc_assets.operate.pause import paused_objects
from resources.salesforce import SalesforceResource
from sensors.budget import budget_hold_back
from sensors.work import Backoff, failed_in_a_row, mode_run_config, objects_in_flight

# The objects of `due` (names) a run need not carry this window, given the instance, the org and the time.
Quiet = Callable[[dg.DagsterInstance, SalesforceResource, list[str], float], set[str]]


BACKGROUND = -10  # the run priority of work no change waits for (module docstring)


@dataclass(frozen=True)
class Cycle:
    """What a cycle sensor asks for: `action` for each object of `every` (name -> seconds between its windows)."""

    action: Action
    every: dict[str, float]
    per_run: int
    reserve: float  # api_budget_reserve
    reason: str  # the runs' reason tag, before ": <n> objects due"
    done: str  # what a run did to an object in a window, for the skip reason ("polled")
    first_waits: bool = False  # an object new to the cursor waits a window (module docstring)
    quiet: Quiet | None = None
    retry_cap: float | None = None  # an object whose runs failed waits, up to this long (module docstring)
    priority: int = 0  # the runs' `dagster/priority` (module docstring)

    def windows(self, now: float) -> dict[str, int]:
        return {name: int(now // every) for name, every in self.every.items()}


def build_cycle_sensor(
    *,
    name: str,
    cycle: Cycle,
    description: str,
    max_tick_seconds: int,
    default_status: dg.DefaultSensorStatus,
) -> dg.SensorDefinition:
    """The one sensor of `cycle`: it ticks as often as its shortest window, at least every `max_tick_seconds` (a
    long window is still checked that often: one missed while held back is asked soon after)."""
    tick = max(1, min(int(min(cycle.every.values())), max_tick_seconds))

    @dg.sensor(
        name=name,
        minimum_interval_seconds=tick,
        default_status=default_status,
        asset_selection=[replica_key(n) for n in cycle.every],
        description=description,
    )
    def cycle_sensor(context: dg.SensorEvaluationContext, salesforce: SalesforceResource) -> dg.SensorResult:
        return plan_cycle(context, salesforce, cycle)

    return cycle_sensor


def plan_cycle(
    context: dg.SensorEvaluationContext, salesforce: SalesforceResource, cycle: Cycle, now: float | None = None
) -> dg.SensorResult:
    """The runs carrying every object of `cycle` whose window is due (module docstring), or why none."""
    now = time.time() if now is None else now
    windows = cycle.windows(now)
    seen: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
    cursor = {n: w for n, w in seen.items() if n in windows}  # objects no longer served are dropped
    started = {n: w for n, w in windows.items() if cycle.first_waits and n not in cursor}
    due = [n for n, w in windows.items() if cursor.get(n) != w and n not in started]
    what = f"{cycle.action.name} cycle"
    if not due:
        waiting = f"; {len(started)} objects start their count, asked a window from now" if started else ""
        return dg.SensorResult(
            skip_reason=f"{what}: every object was {cycle.done} in its window ({len(windows)} objects){waiting}",
            cursor=_dumps(cursor | started),
        )
    paused = paused_objects(context.instance, due)
    busy = objects_in_flight(context.instance)
    ready = [n for n in due if n not in paused and n not in busy]
    failing = waiting_after_failures(context.instance, cycle, ready, now)
    if failing:
        shown = ", ".join(list(failing.values())[:20])
        context.log.warning(f"{what}: {len(failing)} objects wait after failed runs: {shown}")
        ready = [n for n in ready if n not in failing]
    if not ready:
        return dg.SensorResult(
            skip_reason=f"{what}: {len(due)} objects due, none ready: {len(paused)} paused, {len(failing)} waiting "
            f"after failed runs, the others with a run queued or in flight",
            cursor=_dumps(cursor | started),
        )
    if cycle.action.api_budget and (hold := budget_hold_back(salesforce, cycle.reserve)):
        return dg.SensorResult(skip_reason=hold, cursor=_dumps(cursor | started))
    quiet = cycle.quiet(context.instance, salesforce, ready, now) if cycle.quiet else set()
    asked = [n for n in ready if n not in quiet]
    requests = [
        _request(cycle, {n: windows[n] for n in asked[start : start + cycle.per_run]})
        for start in range(0, len(asked), cycle.per_run)
    ]
    done = _dumps(cursor | started | {n: windows[n] for n in ready})
    if not requests:
        return dg.SensorResult(skip_reason=f"{what}: {len(quiet)} objects due, none changed in the org", cursor=done)
    if quiet:
        context.log.info(f"{what}: {len(quiet)} objects due have nothing new in the org: not asked this window")
    return dg.SensorResult(run_requests=requests, cursor=done)


def waiting_after_failures(instance: dg.DagsterInstance, cycle: Cycle, names: list[str], now: float) -> dict[str, str]:
    """The objects of `names` still backing off after failed runs (module docstring), each with what to show."""
    if cycle.retry_cap is None or not names:
        return {}
    out = {}
    for name, (failures, ended) in failed_in_a_row(instance, names).items():
        every = cycle.every[name]
        left = ended + Backoff(every, max(every, cycle.retry_cap)).delay(failures) - now
        if left > 0:
            out[name] = f"{name} ({failures} failed in a row, next in {left:.0f} s)"
    return out


def _request(cycle: Cycle, windows: dict[str, int]) -> dg.RunRequest:
    mode, names = cycle.action.name, list(windows)
    key = ",".join(f"{n}:{w}" for n, w in windows.items())
    return dg.RunRequest(
        run_key=f"{mode}-{hashlib.sha256(key.encode()).hexdigest()[:20]}",
        asset_selection=[replica_key(n) for n in names],
        run_config=mode_run_config(dict.fromkeys(names, mode)),
        tags=run_tags(mode=mode, reason=f"{cycle.reason}: {len(names)} objects due", objects=names)
        | ({PRIORITY_TAG: str(cycle.priority)} if cycle.priority else {}),
    )


def _dumps(cursor: dict[str, int]) -> str:
    return json.dumps(cursor, sort_keys=True)
