"""The CDC subscriber's stream status in Dagster: observations of ``landing_zone`` and a health check.

The subscriber (``python -m cdc_subscriber subscribe``) writes each stream's status to ``<landing zone>/_subscriber``
(``CDC_SUBSCRIBER_STATE`` elsewhere). ``subscriber_status_sensor`` reads it every 30 s and reports:

- an ``AssetObservation`` of ``landing_zone`` whose numeric metadata (``lag_seconds``, ``events_per_second``,
  ``events_landed``, ``last_replay_id``) plots over time in the UI, plus the state and the last error;
- an evaluation of the ``subscriber_stream_healthy`` check: it fails when a stream is ``FAILED`` or
  ``FAILED_PERMANENTLY`` (or stopped reporting: its process is gone) or its lag passes
  ``subscriber_max_lag_seconds`` (replication.yaml option, default 300). The same check can run on demand.

A landing zone no subscriber of ours reports to (files dropped by another tool) is skipped: nothing to observe.
Several streams (one per channel) add up: the worst state, the largest lag, the summed throughput.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import dagster as dg

from cdc_assets.assets import LANDING_ZONE
from cdc_assets.config import ReplicationConfig
from cdc_subscriber.status import STATES, StreamStatus, read_statuses
from resources.landing_zone import LandingZone

SENSOR_NAME = "subscriber_status_sensor"
CHECK_NAME = "subscriber_stream_healthy"
UNHEALTHY = ("FAILED", "FAILED_PERMANENTLY")


def state_dir(landing: LandingZone) -> Path:
    return Path(os.environ.get("CDC_SUBSCRIBER_STATE") or Path(landing.path) / "_subscriber")


def summarize(statuses: list[StreamStatus], max_lag_seconds: float,
              now: dt.datetime | None = None) -> tuple[bool, str, dict[str, Any]]:
    """(healthy, description, metadata) of every stream together."""
    now = now or dt.datetime.now(dt.UTC)
    states = {s.topic: s.effective_state(now) for s in statuses}
    worst = max(states.values(), key=lambda state: (state in UNHEALTHY, STATES.index(state)))
    lag = max((s.lag_seconds or 0.0 for s in statuses), default=0.0)
    errors = [f"{s.topic}: {s.last_error} (at {s.last_error_at})" for s in statuses if s.last_error]
    problems = [f"{topic} is {state}" for topic, state in states.items() if state in UNHEALTHY]
    if lag > max_lag_seconds:
        problems.append(f"lag {lag:.0f}s is over {max_lag_seconds:.0f}s")
    description = ("; ".join(problems) + (f". Last error: {errors[-1]}" if errors else "")) if problems else (
        f"{len(statuses)} stream(s) {worst}, lag {lag:.1f}s")
    metadata: dict[str, Any] = {
        "stream_state": dg.MetadataValue.text(worst),
        "lag_seconds": dg.MetadataValue.float(float(lag)),
        "events_per_second": dg.MetadataValue.float(float(sum(s.events_per_second for s in statuses))),
        "events_landed": dg.MetadataValue.int(sum(s.events_landed for s in statuses)),
        "last_replay_id": dg.MetadataValue.int(max((s.last_replay_id or 0 for s in statuses), default=0)),
        "resyncs": dg.MetadataValue.int(sum(s.resyncs for s in statuses)),
        "streams": dg.MetadataValue.json({s.topic: {"state": states[s.topic], "lag_seconds": s.lag_seconds,
                                                    "events_per_second": s.events_per_second,
                                                    "last_replay_id": s.last_replay_id,
                                                    "updated_at": s.updated_at} for s in statuses}),
    }
    if errors:
        metadata["last_error"] = dg.MetadataValue.text(errors[-1])
    return not problems, description, metadata


def _max_lag(replication: ReplicationConfig) -> float:
    return replication.options.subscriber_max_lag_seconds


def build_subscriber_status_sensor(*, replication: ReplicationConfig,
                                   default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
                                   ) -> dg.SensorDefinition:
    max_lag = _max_lag(replication)

    @dg.sensor(name=SENSOR_NAME, minimum_interval_seconds=30, default_status=default_status,
               description="Observes landing_zone with the CDC subscriber's stream status (state, lag, throughput) "
                           f"and evaluates {CHECK_NAME}.")
    def subscriber_status_sensor(context: dg.SensorEvaluationContext, landing: LandingZone) -> dg.SensorResult:
        statuses = read_statuses(state_dir(landing))
        if not statuses:
            return dg.SensorResult(skip_reason=f"no subscriber reports in {state_dir(landing)}")
        healthy, description, metadata = summarize(statuses, max_lag)
        return dg.SensorResult(asset_events=[
            dg.AssetObservation(asset_key=LANDING_ZONE, metadata=metadata, description=description),
            dg.AssetCheckEvaluation(asset_key=LANDING_ZONE, check_name=CHECK_NAME, passed=healthy,
                                    metadata=metadata, description=description),
        ])

    return subscriber_status_sensor


def build_subscriber_check(*, replication: ReplicationConfig) -> dg.AssetChecksDefinition:
    max_lag = _max_lag(replication)

    @dg.asset_check(asset=LANDING_ZONE, name=CHECK_NAME,
                    description=f"The CDC subscriber streams: not FAILED, lag under {max_lag:.0f}s.")
    def subscriber_stream_healthy(landing: LandingZone) -> dg.AssetCheckResult:
        statuses = read_statuses(state_dir(landing))
        if not statuses:
            return dg.AssetCheckResult(passed=True, description="no subscriber of ours reports to this landing zone")
        healthy, description, metadata = summarize(statuses, max_lag)
        return dg.AssetCheckResult(passed=healthy, description=description, metadata=metadata)

    return subscriber_stream_healthy
