"""change_events retention: drop the payload of rows every reader is done with, keep every row's identity.

change_events is append-only and grows with every event ever landed. Most of a row is its payload (`fields`: the
values the event set); the rest is its identity and position. A row's payload is needed only by the replica of its
entity until that replica has applied it for good, and by nothing once it is older than any re-delivery. So a
row's `fields` is emptied (the row is *trimmed*: an empty map, the shape a gap row's `fields` has, so any reader
that meets one handles it as it handles a gap row's) when both hold:

1. **its replica is done with it**: `_ingest_seq <= floor(entity)`, the lowest ingest sequence the entity's
   replica could read again: its apply checkpoint (`cdc_apply`), lowered to just before a held transaction or a
   pending resync's replay start (`ReplicaState`); 0 for a replica with no table yet (it may replay everything).
   Rows of an entity no replica follows have no such reader (their floor is the newest ingest);
2. **it is older than the horizon**: its `commit_ts` is older than `change_events_retention_hours` (at least the
   org's 72 h event retention plus a margin: config.py validates).
   Salesforce re-delivers nothing older than 72 h, a reconcile applies only events newer than a record's current
   SystemModstamp (every change at or before that instant is already in it), and a resync's snapshot supersedes
   every older event; so past the horizon no code path applies a payload again.

What stays exact:
- **dedup** (replication/ingest.py) compares `event_key` and `record_id` of stored rows: both stay, so an event
  landed again after its payload was trimmed is still a counted duplicate, however old;
- **the changefeed** looks transaction keys up by `commit_number` (replication/changefeed.py): both stay;
- **describe drift** backfill reads `set_fields` (names, not values): kept, as are `diff_fields`;
- every replica's checkpoint: rows above its floor are never touched, so apply, hold and resync replay read what
  they read before.

The trim is one Delta `UPDATE` per entity (it rewrites the files holding those rows; compaction afterwards merges
them), run in the change_events pool so no ingest commits meanwhile. Rows stay, so `rows_trimmed` counts payloads
dropped, not rows deleted: the identity set costs some 100 bytes a row, compressed far less.

**What else holds the org's values, and for how long** (`options.upkeep`, kept by `upkeep_change_events`):
- the landing archive `<landing>_ingested` (every line as landed): a file older than `landing_archive_days`
  (its modification time: when it was written, kept by the move into the archive) is deleted (`prune_archive`);
- `_quarantine` (raw lines up to `max_line_bytes` each): a row older than `quarantine_days` *and* acknowledged
  (`acknowledge_quarantine`) is deleted (`prune_quarantine`); a row nobody acknowledged stays, since
  `quarantine_empty` fails while it waits and it is the only trace of what went wrong. The delete rewrites the
  files holding those rows; vacuum (`vacuum_retention_hours`) then deletes the old files, and with them the values.
Dead letters live in the subscriber's state folder and are bounded by the subscriber itself. A record erased in
Salesforce is purged everywhere by the `erase_records` job (cdc_assets/operate/erase.py), not by retention.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from replication.apply import APPLY_APP
from replication.quarantine import acknowledged_until
from replication.state import IngestState, ReplicaState
from replication.upkeep.compact import checkpoint_if_moved
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, _sql_literal
from resources.landing_zone import LandingZone
from resources.storage import filesystem, is_uri

TRIMMED = "fields"  # the payload column, emptied


def replay_floor(warehouse: DeltaWarehouse, name: str) -> int:
    """The highest ingest sequence replica `name` will never read again (0: it may read everything)."""
    table = warehouse.table(name)
    if table is None:
        return 0
    floor = table.transaction_version(APPLY_APP) or 0
    state = ReplicaState.read(warehouse, table)
    if state.held:
        floor = min(floor, state.held.from_seq - 1)
    if state.resync_pending:
        floor = min(floor, state.resync_pending.from_seq - 1)
    return max(floor, 0)


def floors(warehouse: DeltaWarehouse, replicated: list[str], entities: list[str], newest_seq: int) -> dict[str, int]:
    """Per entity stored in change_events, how far its rows may be trimmed (module docstring, rule 1)."""
    return {e: replay_floor(warehouse, e) if e in replicated else newest_seq for e in entities}


@dataclass(frozen=True)
class Trimmed:
    rows_trimmed: int
    horizon: str
    floors: dict[str, int]


def stored_entities(table: DeltaTable) -> list[str]:
    actions = pa.table(table.get_add_actions(flatten=True))
    return sorted(pc.unique(actions["partition.entity"]).to_pylist()) if actions.num_rows else []


def timestamp_sql(at: datetime) -> str:
    """A UTC instant as a delta-rs (DataFusion) predicate literal of a `timestamp[us, UTC]` column's type."""
    text = _sql_literal(at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    return f"arrow_cast({text}, 'Timestamp(Microsecond, Some(\"UTC\"))')"


def trim_predicate(entity: str, floor: int, horizon: datetime) -> str:
    return (
        f"entity = {_sql_literal(entity)} AND _ingest_seq <= {int(floor)} AND cardinality({TRIMMED}) > 0 "
        f"AND commit_ts < {timestamp_sql(horizon)}"
    )


def trim_payloads(
    warehouse: DeltaWarehouse, replicated: list[str], *, retention_hours: float, now: datetime
) -> Trimmed | None:
    """Drop the payload of every change_events row past its replica's floor and older than `retention_hours`
    (None: no change_events yet). One UPDATE commit per entity that has such rows."""
    table = warehouse.table(CHANGE_EVENTS)
    if table is None:
        return None
    horizon = now - timedelta(hours=retention_hours)
    newest = IngestState.read(warehouse, table).ingest_seq
    per_entity = floors(warehouse, replicated, stored_entities(table), newest)
    trimmed = 0
    for entity, floor in per_entity.items():
        if floor <= 0:
            continue
        metrics = table.update(updates={TRIMMED: "map([], [])"}, predicate=trim_predicate(entity, floor, horizon))
        trimmed += int(metrics.get("num_updated_rows", 0))
    checkpoint_if_moved(warehouse.reloaded(CHANGE_EVENTS), trimmed)
    return Trimmed(trimmed, horizon.isoformat(), per_entity)


def prune_archive(landing: LandingZone, *, days: float | None, now: datetime) -> int:
    """Delete the files of the landing archive written more than `days` ago (None: keep all); how many."""
    if days is None:
        return 0
    fs, root = filesystem(landing.archive_path)
    horizon = now - timedelta(days=days)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    old = [i.path for i in infos if i.type == pafs.FileType.File and i.mtime is not None and i.mtime < horizon]
    if not is_uri(landing.archive_path):  # never delete through a link (its target is outside the archive)
        old = [p for p in old if not os.path.islink(p)]
    for path in old:
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            continue
    return len(old)


def prune_quarantine(warehouse: DeltaWarehouse, *, days: float | None, now: datetime, attempts: int = 3) -> int:
    """Delete the `_quarantine` rows quarantined more than `days` ago that an acknowledgement covers (None: keep
    all); how many. A replica run that quarantines a line meanwhile makes delta-rs refuse this delete: it is tried
    again on the new version."""
    for attempt in range(attempts):
        table = warehouse.table(QUARANTINE)
        if table is None or days is None:
            return 0
        acked = acknowledged_until(warehouse, table)
        if acked is None:
            return 0
        until = min(acked, now - timedelta(days=days))
        try:
            metrics = table.delete(f"quarantined_at <= {timestamp_sql(until)}")
        except CommitFailedError:
            if attempt + 1 == attempts:
                raise
            continue
        deleted = int(metrics.get("num_deleted_rows", 0))
        checkpoint_if_moved(warehouse.reloaded(QUARANTINE), deleted)
        return deleted
    return 0
