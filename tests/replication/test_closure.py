"""The rules of docs/design/contract.md §5 (replication/closure.py): the close rule, the one-decision-a-run cut, hold and
overflow, on Arrow rows (no Spark)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from replication.closure import (
    decide,
    held_back,
    holders,
    ingest_progress,
    open_transaction,
    overflows,
    pending_resync,
    replay_from,
    resynced,
)
from replication.damaged import deferred_until
from replication.state import DamagedFiles, Held, IngestState, ReplicaState, Resynced, ResyncPending

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REPLICATED = {"Account", "Contact", "Opportunity"}


def rows(*events: tuple[str, str, int]) -> pa.Table:
    """Change rows (entity, transaction key, commit second) in the columns the close rule reads."""
    return pa.table(
        {
            "entity": [e for e, _, _ in events],
            "transaction_key": [t for _, t, _ in events],
            "commit_ts": pa.array([T0 + timedelta(seconds=s) for *_, s in events], pa.timestamp("us", tz="UTC")),
            "commit_number": pa.array([s for *_, s in events], pa.int64()),
            "sequence_number": pa.array([i for i, _ in enumerate(events)], pa.int64()),
            "replay_id": pa.array([None] * len(events), pa.int64()),
        }
    )


def test_a_late_file_of_older_events_does_not_reset_the_close_timer():
    first = ingest_progress(IngestState(), rows(("Account", "TX", 100), ("Contact", "TX", 100)), 1, T0)
    assert first.newest.transaction_key == "TX" and first.newest.entities == ["Account", "Contact"]
    later = T0 + timedelta(seconds=50)
    late = ingest_progress(first, rows(("Account", "OLD", 10)), 2, later)
    assert late.last_ingested_at == T0.isoformat()  # no newer event: TX's timer keeps running
    assert late.newest == first.newest and late.entity_seq == {"Account": 2, "Contact": 1}
    assert open_transaction(late, 60, T0 + timedelta(seconds=61)) is None

    newer = ingest_progress(first, rows(("Opportunity", "TY", 200)), 2, later)
    assert newer.last_ingested_at == later.isoformat()
    assert newer.newest.transaction_key == "TY" and newer.newest.entities == ["Opportunity"]


def test_the_newest_transaction_keeps_the_entities_of_every_batch_it_spans():
    first = ingest_progress(IngestState(), rows(("Account", "TX", 100)), 1, T0)
    more = ingest_progress(first, rows(("Contact", "TX", 101)), 2, T0 + timedelta(seconds=5))
    assert more.newest.entities == ["Account", "Contact"]
    late_part = ingest_progress(more, rows(("Opportunity", "TX", 99)), 3, T0 + timedelta(seconds=9))
    assert late_part.newest.entities == ["Account", "Contact", "Opportunity"]
    assert late_part.last_ingested_at == (T0 + timedelta(seconds=5)).isoformat()


def test_a_run_decides_once_and_closes_by_timeout_only_with_every_replica_holding_the_transaction():
    state = ingest_progress(IngestState(), rows(("Account", "TX", 1), ("Contact", "TX", 1)), 4, T0)
    before, after = T0 + timedelta(seconds=59), T0 + timedelta(seconds=60)
    everyone = {"Account", "Contact", "Opportunity"}
    assert decide(state, 60, before, in_run=everyone, replicated=REPLICATED).open_key == "TX"
    closed = decide(state, 60, after, in_run=everyone, replicated=REPLICATED)
    assert closed.open_key is None and closed.through == 4
    alone = decide(state, 60, after, in_run={"Account"}, replicated=REPLICATED)
    assert alone.open_key == "TX" and "Contact" in alone.reason  # Account alone must not apply it
    # Entities not replicated do not hold anything; an unknown entity set means every replica may hold it.
    assert decide(state, 60, after, in_run={"Account", "Contact"}, replicated=REPLICATED).open_key is None
    unknown = replace(state, newest=replace(state.newest, entities=None))
    assert decide(unknown, 60, after, in_run={"Account", "Contact"}, replicated=REPLICATED).open_key == "TX"


def changes(*rows_: tuple) -> pa.Table:
    """Change rows (transaction key, change type, record id, commit second, ingest seq[, source file]) for the
    hold/overflow rules."""
    return pa.table(
        {
            "transaction_key": [r[0] for r in rows_],
            "change_type": [r[1] for r in rows_],
            "record_id": [r[2] for r in rows_],
            "commit_ts": pa.array([T0 + timedelta(seconds=r[3]) for r in rows_], pa.timestamp("us", tz="UTC")),
            "_ingest_seq": pa.array([r[4] for r in rows_], pa.int64()),
            "source_file": [r[5] if len(r) > 5 else "2026/01/01/00/1.jsonl" for r in rows_],
        }
    )


def test_held_rows_overflows_and_the_resync_they_leave_pending():
    rows_ = changes(
        ("TA", "UPDATE", "001A", 1, 3),
        ("TB", "GAP_OVERFLOW", "001B", 2, 4),
        ("TC", "UPDATE", "001*", 3, 5),
        ("TD", "GAP_OVERFLOW", "001C", 4, 6),
    )
    mask, held = held_back(rows_, "TD")
    assert mask.to_pylist() == [False, False, False, True] and held == Held(transactions=["TD"], from_seq=6)
    assert held_back(rows_, None)[1] is None and held_back(rows_, "TX")[1] is None
    overflow = pc.and_not(overflows(rows_), mask)  # the held overflow is not one yet
    assert overflow.to_pylist() == [False, True, True, False]
    pending = pending_resync(rows_, overflow, ReplicaState())
    assert (pending.from_seq, pending.since) == (4, (T0 + timedelta(seconds=2)).isoformat())
    assert pending.reason == "GAP_OVERFLOW at commit 2026-01-01T00:00:02.000Z"
    # A resync whose snapshot was taken after the first overflow covers it; one already pending stays.
    after_first = ReplicaState(resynced=Resynced(at=(T0 + timedelta(seconds=2)).isoformat(), reason="x"))
    assert pending_resync(rows_, overflow, after_first).from_seq == 5
    assert pending_resync(rows_, overflow, ReplicaState(resync_pending=pending)) is pending
    after_all = ReplicaState(resynced=Resynced(at=(T0 + timedelta(seconds=9)).isoformat(), reason="x"))
    assert pending_resync(rows_, overflow, after_all) is None


def test_a_resync_only_damaged_files_ask_for_names_them_and_waits_its_turn_but_an_org_overflow_never_waits():
    damaged = changes(
        ("damaged-file-1", "GAP_OVERFLOW", "000000000000000AAA", 2, 4, "_damaged/a.jsonl.gz"),
        ("damaged-file-2", "GAP_OVERFLOW", "000000000000000AAA", 3, 4, "_damaged/b.jsonl"),
    )
    pending = pending_resync(damaged, overflows(damaged), ReplicaState())
    assert pending.damaged == DamagedFiles(count=2, examples=["a.jsonl.gz", "b.jsonl"])
    assert pending.reason == "GAP_OVERFLOW at commit 2026-01-01T00:00:02.000Z from 2 damaged landing files"
    # More damaged files join it; the first overflow of the org makes it an ordinary one, from the same point.
    more = changes(("damaged-file-3", "GAP_OVERFLOW", "000000000000000AAA", 5, 6, "_damaged/c.jsonl"))
    joined = pending_resync(more, overflows(more), ReplicaState(resync_pending=pending))
    assert (joined.since, joined.from_seq, joined.damaged.count) == (pending.since, 4, 3)
    org = changes(("TB", "GAP_OVERFLOW", "000000000000000AAA", 6, 7))
    ordinary = pending_resync(org, overflows(org), ReplicaState(resync_pending=joined))
    assert (ordinary.since, ordinary.from_seq, ordinary.damaged) == (pending.since, 4, None)
    assert ordinary.reason == "GAP_OVERFLOW at commit 2026-01-01T00:00:02.000Z"
    # A writer's own overflow claiming the damaged-file origin is the org's for this rule: its source is a landing file.
    forged = changes(("damaged-file-x", "GAP_OVERFLOW", "000000000000000AAA", 2, 4, "2026/01/01/00/x.jsonl"))
    assert pending_resync(forged, overflows(forged), ReplicaState()).damaged is None

    # The resync run for them alone starts the wait; one for another cause leaves the last such time as it was.
    ran = resynced(ReplicaState(resync_pending=pending), T0 + timedelta(hours=1))
    assert ran.damaged_at == ran.at == (T0 + timedelta(hours=1)).isoformat() and ran.reason == pending.reason
    assert resynced(ReplicaState(resync_pending=ordinary, resynced=ran), T0 + timedelta(hours=2)).damaged_at == ran.at
    assert resynced(ReplicaState(), T0).damaged_at is None  # an initial load

    again = ReplicaState(resync_pending=pending, resynced=ran)
    assert deferred_until(again, 3600, T0 + timedelta(hours=1, minutes=59)) == T0 + timedelta(hours=2)
    assert deferred_until(again, 3600, T0 + timedelta(hours=2)) is None  # its time has come
    assert deferred_until(replace(again, resync_pending=ordinary), 3600, T0 + timedelta(hours=1)) is None
    assert deferred_until(ReplicaState(resync_pending=pending), 3600, T0) is None  # never resynced for damage yet


def test_a_resync_replays_from_the_overflow_or_the_held_rows_or_everything_for_an_initial_load():
    pending = ResyncPending(since="", from_seq=4, reason="")
    assert replay_from(ReplicaState(), None) == 1
    assert replay_from(ReplicaState(), 9) == 10
    assert replay_from(ReplicaState(resync_pending=pending), 9) == 4
    assert replay_from(ReplicaState(resync_pending=pending, held=Held(["T"], from_seq=2)), 9) == 2


def test_the_replicas_that_may_hold_the_newest_transaction():
    state = ingest_progress(IngestState(), rows(("Account", "TX", 1), ("Lead", "TX", 1)), 1, T0)
    assert holders(state, REPLICATED) == {"Account"}
    assert holders(replace(state, newest=replace(state.newest, entities=None)), REPLICATED) == REPLICATED
    assert holders(IngestState(), REPLICATED) == set()


def test_unreplicated_entities_enter_the_state_only_up_to_a_bound_and_the_rest_are_counted(monkeypatch, caplog):
    """Every change_events commit carries `entity_seq`: a writer inventing thousands of object names must not make
    it (and every later commit) grow. Replicated entities, and entities already named, are always recorded."""
    import replication.closure as closure

    monkeypatch.setattr(closure, "MAX_TRACKED_ENTITIES", 3)
    first = ingest_progress(
        IngestState(), typed(rows(("Account", "T1", 1), ("Junk1", "T1", 1), ("Junk2", "T1", 1))), 1, T0
    )
    assert first.entity_seq == {"Account": 1, "Junk1": 1, "Junk2": 1} and first.entities_untracked == 0
    invented = [(f"Junk{i}", "T2", 2) for i in range(1, 8)]
    second = ingest_progress(first, typed(rows(("Contact", "T2", 2), *invented)), 2, T0)
    assert second.entity_seq == {"Account": 1, "Contact": 2, "Junk1": 2, "Junk2": 2}  # Junk3..7 left out
    assert second.entities_untracked == 5 and "5 more entities that are not replicated" in caplog.text
    assert second.newest.transaction_key == "T2" and second.newest.entities is None  # too many: every replica
    assert holders(second, REPLICATED) == REPLICATED


def typed(table: pa.Table) -> pa.Table:
    """Change rows with `typed`: true for the replicated entities (as the parse marks them)."""
    return table.append_column("typed", pc.is_in(table["entity"], value_set=pa.array(sorted(REPLICATED))))
