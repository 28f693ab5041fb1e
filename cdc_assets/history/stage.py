"""Stage an apply commit's history versions before the replica commit names them (cdc_assets/history/__init__.py).

Imported by cdc_assets/apply.py, so it imports nothing that imports apply.
"""

from __future__ import annotations

import pyarrow as pa

from cdc_assets.history.chain import history_schema
from cdc_assets.state import HistoryMark
from resources.delta import DeltaWarehouse, aligned_arrow
from resources.staged import write_staged
from spark_ops.schema import ObjectSchema

HISTORY_SUFFIX = "__history"


def history_name(name: str) -> str:
    """The history table of replica `name`: `<warehouse>/<name>__history`."""
    return f"{name}{HISTORY_SUFFIX}"


def stage_versions(warehouse: DeltaWarehouse, schema: ObjectSchema, versions: pa.Table | None, *,
                   version: int) -> HistoryMark:
    """Stage `versions` (spark_ops/history.py rows) for the replica commit that will be `version`; the mark that
    commit stores."""
    if versions is None or not versions.num_rows:
        return HistoryMark(version=version)
    rows = aligned_arrow(versions, history_schema(schema.arrow_schema()))
    name = write_staged(warehouse.root, history_name(schema.name), rows, version=version)
    return HistoryMark(version=version, file=name, versions=rows.num_rows)
