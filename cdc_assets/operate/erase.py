"""Erasure: purge records by Id from everything the platform keeps, for records erased in Salesforce (a person's
right to erasure). The job `erase_records`, launched from the UI with config `object: <Object>` and `ids: [...]`
(15- or 18-character Ids of that object), removes every copy of their values the platform holds:

1. `erase_records_events`, in the `change_events` pool:
   - change_events rows of the object with those record ids (deleted, not trimmed);
   - `_quarantine` rows whose raw line names one of the Ids (whatever object: a bad line is kept as landed);
   - the lines of the landing archive (`<landing>_ingested`) that name one (erase_files.py);
   - both tables vacuumed at once (no retention): the files the deletes replaced still hold the values until then.
2. `erase_records_replica`, holding the host lock of the replica's pool `replica_<Object>` (resources/pool_lock.py):
   - a resync stage waiting in the replica's folder is discarded: it may hold the records (the resync then starts
     its Bulk query again);
   - replica rows deleted (not soft-deleted) and, with `history: true`, every version in `<Object>__history`
     and in the history versions staged for it (resources/staged.py);
   - the changefeed (if the object has one) exported through the delete, so it needs no older Change Data Feed,
     then every feed file rewritten without the records of those Ids;
   - replica and history vacuumed at once and *fully*: every file the log no longer names goes, the Change Data
     Feed's (`_change_data/`, which holds every old image) included.

**What an erasure costs.** A vacuum with no retention ends time travel to the versions before it, for every reader
(the point: older versions are where the values still are). A query reading the table at that moment may fail, and
a replica run reading change_events then fails too: re-run it (nothing is lost). Feed consumers who read the files
before keep what they read: tell them.

**What it does not reach.** Landing files not ingested and retired yet are never rewritten (a visible landing file
is immutable, and its events are still to be applied): if one names an Id the run does everything else, then fails
naming them; run it again after the next landing run and `upkeep_change_events` have retired them. Delta's log
keeps per-file column statistics (up to 64 leading characters of the least and greatest value of a replica's
first 32 columns, and of every column of change_events and `_quarantine`) in the commits written before the
erasure, until those log files are removed. Dead letters (the subscriber's state folder) keep the raw event. The
org itself: erase the record in Salesforce first, or a resync brings it back; an event of it landed again after the
erasure (the org re-delivers for 72 h) is ingested again, so erase once its last change is older than that.
"""

from typing import NamedTuple

import dagster as dg

from cdc_assets.changefeed.export import export_changefeed
from cdc_assets.names import CHANGE_EVENTS_POOL, TAG_OPERATOR, replica_pool, run_tags
from replication.config import ReplicationConfig, SObjectConfig
from replication.history.stage import history_name
from replication.operate.erase_files import files_naming, rewrite_feed, rewrite_landing_files, rewrite_staged
from replication.snapshot import discard_stage
from replication.upkeep.compact import checkpoint_if_moved
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, _sql_literal
from resources.landing_zone import LandingZone
from resources.pool_lock import exclusive, host_lock
from resources.printable import printable
from shared.names import is_record_id

KEY_CHARS = 15  # an 18-character Id is its 15-character form and a case-safe suffix


def erase_keys(ids: list[str]) -> list[str]:
    """The 15-character forms of `ids`; ValueError naming what is not a Salesforce record id."""
    bad = [i for i in ids if not is_record_id(i)]
    if bad or not ids:
        raise ValueError(
            f"not Salesforce record ids (15 or 18 letters and digits): {bad[:5]}"
            if bad
            else "no ids given: config `ids: [<Id>, ...]`"
        )
    return sorted({i[:KEY_CHARS] for i in ids})


def _in_keys(column: str, keys: list[str]) -> str:
    return f"substr({column}, 1, {KEY_CHARS}) IN ({', '.join(_sql_literal(k) for k in keys)})"


def _delete(warehouse: DeltaWarehouse, name: str, predicate: str) -> int:
    table = warehouse.table(name)
    if table is None:
        return 0
    deleted = int(table.delete(predicate).get("num_deleted_rows", 0))
    checkpoint_if_moved(warehouse.reloaded(name), deleted)
    return deleted


def _vacuum_now(warehouse: DeltaWarehouse, name: str, *, full: bool) -> int:
    """Delete the files of `name` no version but the latest names (`full`: also files the log never named)."""
    table = warehouse.table(name)
    if table is None:
        return 0
    return len(table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False, full=full))


def erase_events(warehouse: DeltaWarehouse, landing: LandingZone, name: str, keys: list[str]) -> dict[str, int]:
    """Step 1 of the module docstring (in the change_events pool)."""
    mentions = " OR ".join(f"strpos(raw, {_sql_literal(k)}) > 0" for k in keys)
    out = {
        "change_events_rows_deleted": _delete(
            warehouse, CHANGE_EVENTS, f"entity = {_sql_literal(name)} AND {_in_keys('record_id', keys)}"
        ),
        "quarantine_rows_deleted": _delete(warehouse, QUARANTINE, mentions),
    }
    # Retired files: the archive, and the files set aside because they had quarantined content.
    retired = [rewrite_landing_files(folder, keys) for folder in (landing.archive_path, landing.quarantined_path)]
    out |= {
        "archive_files_rewritten": sum(r.files for r in retired),
        "archive_lines_removed": sum(r.lines for r in retired),
    }
    # _quarantine is also written by replica runs: a lite vacuum deletes only files the log removed, never the new
    # file of a commit under way.
    out["files_vacuumed"] = _vacuum_now(warehouse, CHANGE_EVENTS, full=False) + _vacuum_now(
        warehouse, QUARANTINE, full=False
    )
    return out


def erase_replica(warehouse: DeltaWarehouse, sobject: SObjectConfig, keys: list[str]) -> dict[str, int]:
    """Step 2 of the module docstring (in the replica's pool)."""
    name = sobject.name
    discard_stage(warehouse, name)
    out = {
        "replica_rows_deleted": _delete(warehouse, name, _in_keys('"Id"', keys)),
        "history_rows_deleted": _delete(warehouse, history_name(name), _in_keys('"Id"', keys)),
        "staged_history_rows_removed": rewrite_staged(warehouse.root, history_name(name), keys).lines,
    }
    if sobject.changefeed is not None and warehouse.table(name) is not None:
        export_changefeed(warehouse, name, sobject.changefeed)
        feed = rewrite_feed(sobject.changefeed.object_uri(name), keys)
        out |= {"feed_files_rewritten": feed.files, "feed_records_removed": feed.lines}
    out["files_vacuumed"] = _vacuum_now(warehouse, name, full=True) + _vacuum_now(
        warehouse, history_name(name), full=True
    )
    return out


ERASE_JOB = "erase_records"


class EraseConfig(dg.Config):
    object: str  # the object as in replication.yaml, e.g. Contact
    ids: list[str]  # Ids of its records erased in Salesforce, e.g. [003000000000001AAA]


class Erasure(NamedTuple):
    """What the events step hands the replica step: the object and the records' 15-character keys."""

    name: str
    keys: list[str]


def _report(context: dg.OpExecutionContext, what: str, counts: dict[str, int]) -> None:
    context.log.info(f"{what}: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()))
    context.add_output_metadata({k: dg.MetadataValue.int(v) for k, v in counts.items()})


def build_erase_job(*, replication: ReplicationConfig) -> dg.JobDefinition:
    """`erase_records`: one job for every object (config `object`, `ids`), not one per object: a job per object was
    a thousand job snapshots in the code location at a thousand objects (bench/RESULTS.md, "A thousand
    objects"). Dagster's pools are fixed per op, so the replica step holds the replica pool's host lock
    (resources/pool_lock.py) instead of its slot: a replica step waits for it as for any writer."""

    @dg.op(
        name=f"{ERASE_JOB}_events",
        pool=CHANGE_EVENTS_POOL,
        description="Purge the records from change_events, _quarantine and the landing archive.",
    )
    @exclusive(CHANGE_EVENTS_POOL)
    def events_op(
        context: dg.OpExecutionContext, config: EraseConfig, warehouse: DeltaWarehouse, landing: LandingZone
    ) -> Erasure:
        try:
            if problem := replication.unknown([config.object]):
                raise ValueError(problem)
            keys = erase_keys(config.ids)
        except ValueError as exc:
            raise dg.Failure(f"{ERASE_JOB}: {exc}") from None
        _report(
            context,
            f"{config.object}: {len(keys)} records erased from change_events, _quarantine and the archive",
            erase_events(warehouse, landing, config.object, keys),
        )
        return Erasure(config.object, keys)

    @dg.op(
        name=f"{ERASE_JOB}_replica",
        description="Purge the records from the replica, its history and its changefeed (holding the replica's "
        "host lock: no writer of it runs beside).",
    )
    def replica_op(
        context: dg.OpExecutionContext, erasure: Erasure, warehouse: DeltaWarehouse, landing: LandingZone
    ) -> None:
        name, keys = erasure
        with host_lock(context.instance, replica_pool(name), context.log):
            _report(
                context,
                f"{name}: {len(keys)} records erased from the replica, its history and its changefeed",
                erase_replica(warehouse, replication.object(name), keys),
            )
        if pending := files_naming(landing.path, [f.path for f in landing.list_files()], keys):
            raise dg.Failure(
                f"{len(pending)} landing files not retired yet name erased {name} records (e.g. "
                f"{printable(pending[0])}); "
                f"they are left as landed. Run {ERASE_JOB} again with the same object and ids after the next "
                f"landing run and upkeep_change_events have ingested and retired them."
            )

    @dg.job(
        name=ERASE_JOB,
        tags=run_tags(mode="erase", reason="erasure of records from the UI", hidden={TAG_OPERATOR: "erase"}),
        description="Erase records of one object by Id (config `object`, `ids`) from the replica, its history and "
        "changefeed, change_events, _quarantine and the landing archive, then vacuum them (README 'Erasure'). "
        "Erase the records in Salesforce first.",
    )
    def erase_job():
        replica_op(events_op())

    return erase_job
