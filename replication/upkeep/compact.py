"""Compaction of one Delta table: many small files into few (`optimize.compact`), optionally clustered by a column
(`optimize.z_order`).

The commit is `OPTIMIZE` with dataChange=false: readers see the same rows, a replica's Change Data Feed emits no
records for it (replication/changefeed.py reads only data changes), and the table's app transactions (checkpoints
of ingest and apply, `cdc_state.<key>`) are untouched. Run it only in the table's pool (jobs.py): a merge that read
files this removed would otherwise fail its commit (`ConcurrentWriteError`, safe but wasted).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from resources.delta import CHECKPOINT_EVERY, DeltaWarehouse


@dataclass(frozen=True)
class Footprint:
    """The data files the table's current version references, and their bytes."""

    files: int
    bytes: int

    @classmethod
    def of(cls, table: DeltaTable) -> Footprint:
        actions = pa.table(table.get_add_actions(flatten=True))
        return cls(actions.num_rows, int(pc.sum(actions["size_bytes"]).as_py() or 0) if actions.num_rows else 0)


@dataclass(frozen=True)
class Compacted:
    before: Footprint
    after: Footprint
    files_removed: int
    files_added: int
    version: int

    def metadata(self) -> dict[str, int]:
        return {
            "files_before": self.before.files,
            "files_after": self.after.files,
            "bytes_before": self.before.bytes,
            "bytes_after": self.after.bytes,
            "files_removed": self.files_removed,
            "files_added": self.files_added,
        }


def compact(warehouse: DeltaWarehouse, name: str, *, z_order_by: list[str] | None = None) -> Compacted | None:
    """Compact table `name` (None if it does not exist). `z_order_by`: cluster by these columns (rewrites every
    file, not only small ones: costlier, better pruning on those columns)."""
    table = warehouse.table(name)
    if table is None:
        return None
    before = Footprint.of(table)
    metrics = table.optimize.z_order(z_order_by) if z_order_by else table.optimize.compact()
    table = warehouse.reloaded(name)
    checkpoint_if_moved(table, metrics["numFilesAdded"] or metrics["numFilesRemoved"])
    return Compacted(
        before, Footprint.of(table), int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"]), table.version()
    )


def checkpoint_if_moved(table: DeltaTable, moved: int) -> None:
    """A log checkpoint after upkeep commits, so loading the table replays at most a few JSON commits
    (writers checkpoint every `CHECKPOINT_EVERY` versions; upkeep's commits would otherwise shift that)."""
    if moved and table.version() % CHECKPOINT_EVERY:
        table.create_checkpoint()
