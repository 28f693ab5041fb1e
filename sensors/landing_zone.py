"""landing_zone_sensor: new landing files -> one run of change_events and the replicas those files touch.

The cursor (JSON) remembers only files requested but not yet ingested, so it stays small: whether a file is
ingested is read from change_events itself (its commits name the files). The run key is derived from the file set
(paths and sizes), so a re-evaluated tick never requests the same files twice.

A landing run that is still queued ingests every file pending when it starts, so new files its selection already
covers get no run of their own: runs slower than the landing rate would otherwise pile up in the queue, each one
after the first finding nothing to ingest, and hold back the reconciliation sensor (it waits for an object's runs).

When nothing new lands, the newest transaction eventually counts as closed (`transaction_close_after`, design §5);
the sensor then requests one run of the replicas so that transaction is applied without waiting for more events.
"""


import json
from datetime import datetime, timezone

import dagster as dg

from cdc_assets.assets import CHANGE_EVENTS_KEY, replica_key
from cdc_assets.config import ReplicationConfig
from cdc_assets.ingest import CE_STATE, pending_files
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import LandingZone, file_set_key
from sensors.reconciliation import object_tag

SENSOR_NAME = "landing_zone_sensor"
TAG_REASON = "cdc/reason"
TAG_FILES = "cdc/files"
REASON_FILES = "new landing files"
WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING]


def build_landing_zone_sensor(*, replication: ReplicationConfig,
                              default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
                              ) -> dg.SensorDefinition:
    replicas = [replica_key(n) for n in replication.names]

    @dg.sensor(name=SENSOR_NAME, minimum_interval_seconds=10, default_status=default_status,
               asset_selection=[CHANGE_EVENTS_KEY, *replicas],
               description="Requests a change_events + replica run for newly landed CDC files, and a replica run "
                           "when the newest transaction closes by timeout.")
    def landing_zone_sensor(context: dg.SensorEvaluationContext, landing: LandingZone,
                            warehouse: DeltaWarehouse) -> dg.SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        requested: dict[str, int] = cursor.get("requested", {})
        pending = pending_files(warehouse, landing)
        new = [f for f in pending if requested.get(f.path) != f.size]
        still_pending = {f.path: f.size for f in pending if f.path in requested}
        if new:
            entities = landing.entities_in(new)
            targets = [r for n, r in zip(replication.names, replicas) if entities is None or n in entities]
            cursor["requested"] = still_pending | {f.path: f.size for f in new}
            if {CHANGE_EVENTS_KEY, *targets} <= _waiting_landing_selection(context.instance):
                return dg.SensorResult(skip_reason=f"{len(new)} new landing files: a queued landing run will "
                                                   "ingest them", cursor=json.dumps(cursor, sort_keys=True))
            request = dg.RunRequest(
                run_key=f"landing-{file_set_key(new)}",
                asset_selection=[CHANGE_EVENTS_KEY, *targets],
                tags={TAG_REASON: REASON_FILES, TAG_FILES: str(len(new)),
                      **{object_tag(n): "1" for n in replication.names if replica_key(n) in targets}},
            )
            return dg.SensorResult(run_requests=[request], cursor=json.dumps(cursor, sort_keys=True))

        cursor["requested"] = still_pending
        close = _close_request(warehouse, replication, replicas, cursor)
        return dg.SensorResult(run_requests=[close] if close else [],
                               skip_reason=None if close else "no new landing files",
                               cursor=json.dumps(cursor, sort_keys=True))

    return landing_zone_sensor


def _waiting_landing_selection(instance: dg.DagsterInstance) -> set[dg.AssetKey]:
    """Assets selected by landing runs not started yet (each ingests every file pending when it starts)."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=WAITING, tags={TAG_REASON: REASON_FILES}))
    return {key for run in runs for key in run.asset_selection or ()}


def _close_request(warehouse: DeltaWarehouse, replication: ReplicationConfig, replicas: list[dg.AssetKey],
                   cursor: dict) -> dg.RunRequest | None:
    state = DeltaWarehouse.commit_state(warehouse.table(CHANGE_EVENTS), CE_STATE)
    seq, last = state.get("ingest_seq"), state.get("last_ingested_at")
    if not seq or not last or cursor.get("closed_seq") == seq:
        return None
    age = (datetime.now(timezone.utc) - datetime.fromisoformat(last)).total_seconds()
    if age < replication.transaction_close_after:
        return None
    cursor["closed_seq"] = seq
    return dg.RunRequest(run_key=f"close-{seq}", asset_selection=replicas,
                         tags={TAG_REASON: "newest transaction closed by timeout",
                               **{object_tag(n): "1" for n in replication.names}})
