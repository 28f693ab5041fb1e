"""The CDC subscriber's stream status in Dagster: observations of ``landing_zone`` and its two checks.

The subscriber (``python -m cdc_subscriber subscribe``) writes each stream's status to ``<landing zone>-subscriber``
(``CDC_SUBSCRIBER_STATE`` elsewhere). ``subscriber_status_sensor`` reads it every 30 s and reports:

- an ``AssetObservation`` of ``landing_zone`` whose numeric metadata (``lag_seconds``, ``events_per_second``,
  ``events_landed``, ``last_replay_id``) plots over time in the UI, plus the state and the last error, and
  ``dead_letters`` (unique events ever) and ``dead_letters_unacknowledged``;
- an evaluation of the checks ``subscriber_stream_healthy`` and ``subscriber_no_dead_letters``: what each means,
  and its on-demand definition, is in cdc_assets/landing_checks.py.

A landing zone no subscriber of ours reports to (files dropped by another tool) is skipped: nothing to observe.
"""

from __future__ import annotations

import dagster as dg

from cdc_assets.landing_checks import CHECK_NAME, DEAD_LETTERS_CHECK, dead_letter_report, state_dir, summarize
from cdc_assets.names import LANDING_ZONE
from replication.config import ReplicationConfig
from resources.landing_zone import LandingZone
from shared.subscriber_state import read_statuses

SENSOR_NAME = "subscriber_status_sensor"


def build_subscriber_status_sensor(
    *, replication: ReplicationConfig, default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
) -> dg.SensorDefinition:
    max_lag = replication.options.subscriber_max_lag_seconds

    @dg.sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=30,
        default_status=default_status,
        description="Observes landing_zone with the CDC subscriber's stream status (state, lag, throughput, "
        f"dead letters) and evaluates {CHECK_NAME} and {DEAD_LETTERS_CHECK}.",
    )
    def subscriber_status_sensor(context: dg.SensorEvaluationContext, landing: LandingZone) -> dg.SensorResult:
        statuses = read_statuses(state_dir(landing))
        if not statuses:
            return dg.SensorResult(skip_reason=f"no subscriber reports in {state_dir(landing)}")
        healthy, description, metadata = summarize(statuses, max_lag)
        clean, letters_description, letters = dead_letter_report(state_dir(landing))
        return dg.SensorResult(
            asset_events=[
                dg.AssetObservation(asset_key=LANDING_ZONE, metadata=metadata | letters, description=description),
                dg.AssetCheckEvaluation(
                    asset_key=LANDING_ZONE,
                    check_name=CHECK_NAME,
                    passed=healthy,
                    metadata=metadata,
                    description=description,
                ),
                dg.AssetCheckEvaluation(
                    asset_key=LANDING_ZONE,
                    check_name=DEAD_LETTERS_CHECK,
                    passed=clean,
                    metadata=letters,
                    description=letters_description,
                ),
            ]
        )

    return subscriber_status_sensor
