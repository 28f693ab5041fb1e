"""Stage an apply commit's history versions before the replica commit names them (cdc_assets/history/__init__.py).

Imported by replication/apply.py, so it imports nothing that imports apply.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from object_schema.describe import ObjectSchema
from replication.history.chain import history_schema
from replication.state import HistoryMark, ResyncPending
from resources.delta import DeltaWarehouse, aligned_arrow
from resources.staged import write_staged

HISTORY_SUFFIX = "__history"


def history_name(name: str) -> str:
    """The history table of replica `name`: `<warehouse>/<name>__history`."""
    return f"{name}{HISTORY_SUFFIX}"


def stage_versions(
    warehouse: DeltaWarehouse, schema: ObjectSchema, versions: pa.Table | None, *, version: int
) -> HistoryMark:
    """Stage `versions` (spark_ops/history.py rows) for the replica commit that will be `version`; the mark that
    commit stores."""
    if versions is None or not versions.num_rows:
        return HistoryMark(version=version)
    rows = aligned_arrow(versions, history_schema(schema.arrow_schema()))
    name = write_staged(warehouse.root, history_name(schema.name), rows, version=version)
    return HistoryMark(version=version, file=name, versions=rows.num_rows)


def before_overflow(versions: pa.Table | None, pending: ResyncPending | None) -> pa.Table | None:
    """`versions` without those committed at or after a pending overflow: from there until the resync the replica
    folds changes over rows that miss what the overflow dropped, so the states after them are not known (the
    resync's snapshot and the events it replays make the versions instead)."""
    if versions is None or pending is None or not versions.num_rows:
        return versions
    since = pa.scalar(datetime.fromisoformat(pending.since.replace("Z", "+00:00")), pa.timestamp("us", tz="UTC"))
    return versions.filter(pc.less(versions["_sf_commit_ts"].cast(pa.timestamp("us", tz="UTC")), since))
