"""Retiring ingested landing files, so that a run's cost does not grow with every file ever landed.

Each landing file an ingest commits is remembered by change_events as an app transaction (`landing:<path>`): a
file seen again is skipped without being read. Left alone, both grow forever: the landing zone, which every sensor
tick and run lists, and the app transactions, which every load of change_events replays from its checkpoint
(the 1,000-run upkeep bench measured both growing; bench/RESULTS.md). Upkeep therefore

- **retires** every visible landing file change_events has ingested: moved under the landing zone's sibling
  `<landing>_ingested/` (same relative path; `landing_after_ingest: archive`, the default), deleted (`delete`),
  or left (`keep`: nothing below happens). A file with any row in `_quarantine` (a bad line, a truncated end, or
  the whole file) is neither archived nor deleted but **set aside** under `<landing>_quarantined/`, whatever the
  setting but `keep`: it is the evidence of what went wrong, kept for a person to look at, and out of the zone
  (left there, it would be read again once its app transaction expired, and ask another resync). Neither place
  ever replaces a file: a name taken gets `-<n>` before its suffix;
- lets their app transactions **expire** after `landing_ledger_hours`: ingest stamps them with the commit's time,
  and change_events carries `delta.setTransactionRetentionDuration`, so delta-rs drops them from snapshots and
  checkpoints. A retired file landed again within that window is skipped unread; after it, it is read again and
  every event in it is a duplicate (dedup looks its keys up in change_events, which keeps every identity), so the
  tables stay exact either way.

A crash between the ingest commit and the retirement leaves the file visible and remembered: the next upkeep
retires it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from replication.config import UpkeepConfig
from replication.ingest import landing_files
from resources.delta import CHANGE_EVENTS, QUARANTINE, TXN_RETENTION, DeltaWarehouse
from resources.landing_zone import LandingFile, LandingZone
from resources.printable import printable

log = logging.getLogger(__name__)

KEEP_FOREVER = "interval 36500 days"  # `keep` after a retention was set: files stay listed, so never expire them


@dataclass(frozen=True)
class Retired:
    files_retired: int  # ingested files moved to the archive or deleted, or set aside
    files_pending: int  # visible files not ingested yet (left for the next run)
    files_set_aside: int = 0  # of the retired: moved to `<landing>_quarantined/` (they had quarantined content)


def ledger_retention(settings: UpkeepConfig) -> str:
    """change_events' `delta.setTransactionRetentionDuration` for these settings."""
    if settings.landing_after_ingest == "keep":
        return KEEP_FOREVER
    return f"interval {max(1, round(settings.landing_ledger_hours * 3600))} seconds"


def retire_landing(warehouse: DeltaWarehouse, landing: LandingZone, settings: UpkeepConfig) -> Retired | None:
    """Retire the ingested landing files and set change_events' retention of their app transactions (module
    docstring); None when there is no change_events table yet."""
    table = warehouse.table(CHANGE_EVENTS)
    if table is None:
        return None
    wanted = ledger_retention(settings)
    configured = table.metadata().configuration.get(TXN_RETENTION)
    if configured != wanted and (configured is not None or settings.landing_after_ingest != "keep"):
        table.alter.set_table_properties({TXN_RETENTION: wanted})
    pending, ingested = landing_files(warehouse, landing)
    if settings.landing_after_ingest == "keep":
        return Retired(files_retired=0, files_pending=len(pending))
    flagged = quarantined_files(warehouse, ingested)
    aside = landing.retire([f for f in ingested if f.path in flagged], to=landing.quarantined_path)
    if aside:
        shown = ", ".join(printable(p) for p in sorted(flagged)[:5])
        log.warning(
            "%d ingested landing files had quarantined content (%s%s): moved to %s, not %s; look at their "
            "_quarantine rows, then delete them",
            aside,
            shown,
            ", ..." if len(flagged) > 5 else "",
            landing.quarantined_path,
            "deleted" if settings.landing_after_ingest == "delete" else "archived",
        )
    retired = landing.retire(
        [f for f in ingested if f.path not in flagged], delete=settings.landing_after_ingest == "delete"
    )
    return Retired(files_retired=retired + aside, files_pending=len(pending), files_set_aside=aside)


def quarantined_files(warehouse: DeltaWarehouse, files: list[LandingFile]) -> set[str]:
    """The paths of `files` that have a row in `_quarantine`."""
    table = warehouse.table(QUARANTINE)
    if table is None or not files:
        return set()
    paths = pa.array(sorted({f.path for f in files}), pa.string())
    rows = warehouse.read(table, columns=["source_file"], filter=pc.field("source_file").isin(paths))
    return set(pc.unique(rows["source_file"]).to_pylist())
