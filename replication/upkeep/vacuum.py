"""Vacuum of one Delta table: delete the files no version within the retention still references.

Compaction and merges only *remove* files from the log; the Parquet files stay until vacuum. The retention bounds
time travel, and a replica's Change Data Feed: the changefeed reads the CDF of every replica version after its
position, so a version must outlive its export (keep `vacuum_retention_hours` well above the feed's interval;
README "Table upkeep"). Vacuum never touches `_delta_log`, so the commit holding a table's state stays findable.
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.upkeep.compact import checkpoint_if_moved
from resources.delta import DeltaWarehouse


@dataclass(frozen=True)
class Vacuumed:
    """`files_deleted`: the files delta-rs listed as vacuumed, i.e. every tombstone still in the log older than the
    retention, including files an earlier vacuum already deleted (it grows with the table's history)."""

    files_deleted: int
    retention_hours: int


def vacuum(warehouse: DeltaWarehouse, name: str, *, retention_hours: float) -> Vacuumed | None:
    """Delete unreferenced files of table `name` older than `retention_hours` (None if no table). A retention below
    Delta's 7-day default is the user's choice (replication.yaml), so delta-rs's own guard is lifted."""
    table = warehouse.table(name)
    if table is None:
        return None
    hours = int(retention_hours)
    deleted = table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
    checkpoint_if_moved(warehouse.reloaded(name), len(deleted))
    return Vacuumed(len(deleted), hours)
