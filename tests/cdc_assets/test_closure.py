"""The transaction close rule and the one-decision-a-run cut (cdc_assets/closure.py), on Arrow rows (no Spark)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa

from dataclasses import replace

from cdc_assets.closure import decide, ingest_progress, open_transaction
from cdc_assets.state import IngestState

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
REPLICATED = {"Account", "Contact", "Opportunity"}


def rows(*events: tuple[str, str, int]) -> pa.Table:
    """Change rows (entity, transaction key, commit second) in the columns the close rule reads."""
    return pa.table({
        "entity": [e for e, _, _ in events],
        "transaction_key": [t for _, t, _ in events],
        "commit_ts": pa.array([T0 + timedelta(seconds=s) for *_, s in events], pa.timestamp("us", tz="UTC")),
        "commit_number": pa.array([s for *_, s in events], pa.int64()),
        "sequence_number": pa.array([i for i, _ in enumerate(events)], pa.int64()),
        "replay_id": pa.array([None] * len(events), pa.int64()),
    })


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
