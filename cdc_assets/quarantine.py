"""`_quarantine`: one row per bad line, with its reason (design §9), written by ingest and by apply.

Rows are keyed by (file, line): recording the same line again (a re-run after a crash) inserts nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

import pyarrow as pa

from cdc_assets.state import QuarantineState
from resources.delta import QUARANTINE, DeltaWarehouse

log = logging.getLogger(__name__)

LOGGED = 20  # warning lines per call; the table has them all


def record_quarantine(warehouse: DeltaWarehouse, entries: pa.Table, *, run_id: str, now: datetime, key: str,
                      consequence: str = "line quarantined") -> None:
    """Insert `entries` (`source_file, source_line, raw, reason`) stamped with the run and time, and log them;
    `key`: who quarantines (`Q_STATE`, `Q_APPLY_STATE` in cdc_assets/state.py)."""
    if not entries.num_rows:
        return
    n = entries.num_rows
    stamped = entries.append_column("run_id", pa.repeat(pa.scalar(run_id, pa.string()), n)) \
                     .append_column("quarantined_at", pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), n))
    warehouse.insert_missing(QUARANTINE, stamped, keys=["source_file", "source_line"], key=key,
                             state=QuarantineState(run_id=run_id).to_dict())
    for r in entries.slice(0, LOGGED).to_pylist():
        log.warning("Landing file %s line %s: %s; %s", r["source_file"], r["source_line"], r["reason"], consequence)
