"""The rules of docs/design/contract.md §5, written once: when the newest transaction counts as closed, which replicas
may hold it, how far a run applies, what a replica holds back, and what an overflow leaves pending. The replica asset
(apply), the sync steps (resync, reconcile), the landing sensor and the reconciliation planner (sensors/work.py) all
call these.

A transaction is applied only once it is closed: a later event (in commit order) of another transaction has been
ingested, or no newer event has landed for `transaction_close_after` seconds. Only the newest transaction can be
open. `open_transaction` is that rule, written once: the replica asset, the landing sensor (when to request the
close-by-timeout run) and the run decision below all use it; `holders` says which replicas may hold rows of it.

What the rule reads is kept by ingest in change_events' commit state (`IngestState`, replication/state.py), by
`ingest_progress`:

- `newest`: the newest event ingested, its transaction key and the entities that transaction touched (so a sensor
  knows which replicas hold it);
- `last_ingested_at`: when the newest event last *moved forward*. A late file of older events moves nothing and
  leaves the timer alone: it is not a newer event, so it must not keep the newest transaction open;
- `entity_seq`: per entity, the last ingest sequence number that stored rows of it (a replica whose
  `applied_through` is below it has rows to apply).

**Bounded, whatever lands.** Every change_events commit carries this state, so it must not grow with what a writer
invents: rows of an entity that is not replicated are stored (and counted `ignored`), but a new such entity enters
`entity_seq` only while it names fewer than `MAX_TRACKED_ENTITIES` entities (no replica reads the entry of an entity
that is not replicated; one added to replication.yaml later starts from a full load). The others are counted
(`IngestState.entities_untracked`, and a warning). A newest transaction touching more entities than that records
them as unknown (`entities` None: every replica may hold it), the safe reading.

**One decision a run** (`Cut`): each replica step would otherwise read change_events and the clock for itself, and
two replicas of one run could disagree (one holds transaction TX, the other applies it, both recording the same
`applied_through`) at the timeout boundary or when another run ingests in between. So `decide` is made once, by
the first replica step of a run (`cdc_assets/run_cut.py` pins it as a run tag), and every replica of the run
applies through the same ingest sequence number and holds the same transaction. A run that does not include every
replica holding rows of the newest transaction never closes it by timeout (it would apply it to some of them only):
it keeps it open, and the runs the landing sensor requests, which include them all, close it.

**Hold and overflow, per replica** (`held_back`, `pending_resync`, `replay_from`, `resynced`): the rows of the run's
open transaction are held (read again from `Held.from_seq` by the next run); an overflow (`GAP_OVERFLOW`, or a
wildcard record id `001*`) cannot be applied and leaves a pending resync, unless the last resync's snapshot was
taken after it; a resync replays every event from the first overflow (or held row) over its snapshot. A pending
resync that only damaged landing files asked for says so, and waits its turn (replication/damaged.py).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from replication.damaged import damaged_behind
from replication.state import DamagedFiles, Held, IngestState, Newest, ReplicaState, Resynced, ResyncPending
from spark_ops.order import arrow_order, arrow_positions

log = logging.getLogger(__name__)

UTC_US = pa.timestamp("us", tz="UTC")
MAX_TRACKED_ENTITIES = 1_000  # entities change_events' state names before new unreplicated ones stop being added


def open_transaction(ce_state: IngestState, close_after: float, clock: datetime) -> str | None:
    """The newest transaction's key while no newer event has landed for `close_after` seconds at `clock`."""
    newest, last = ce_state.newest, ce_state.last_ingested_at
    if not newest or not last:
        return None
    age = (clock - datetime.fromisoformat(last)).total_seconds()
    return newest.transaction_key if age < close_after else None


def newest_event(rows: pa.Table) -> Newest | None:
    """The newest event in commit order (docs/design/contract.md §4, `spark_ops/order.py`): its transaction key and
    position as `[commit micros, commit number, sequence number, replay id]`."""
    if not rows.num_rows:
        return None
    top = rows.slice(arrow_order(rows, descending=True)[0].as_py(), 1)
    return Newest(transaction_key=top["transaction_key"][0].as_py(), position=arrow_positions(top)[0])


def _entities_of(rows: pa.Table, transaction_key: str) -> set[str]:
    return set(pc.unique(rows.filter(pc.equal(rows["transaction_key"], transaction_key))["entity"]).to_pylist())


def ingest_progress(previous: IngestState, fresh: pa.Table, seq: int, now: datetime) -> IngestState:
    """change_events' state after storing `fresh` rows as ingest `seq` at `now` (the closure part: `newest`,
    `last_ingested_at`, `entity_seq`, `entities_untracked`; the rest as `previous`). `fresh` rows of a replicated
    entity have `typed` true (rows without the column count as replicated)."""
    before, candidate = previous.newest, newest_event(fresh)
    moved = candidate is not None and (not before or candidate.position > before.position)
    newest = candidate if moved else before
    if newest is not None and fresh.num_rows:
        same = before if before is not None and before.transaction_key == newest.transaction_key else None
        known = set(same.entities or []) if same is not None else set()
        # Unknown (too many to name) stays unknown: every replica may hold it.
        if same is None or same.entities is not None:
            entities = known | _entities_of(fresh, newest.transaction_key)
            newest = replace(newest, entities=sorted(entities) if len(entities) <= MAX_TRACKED_ENTITIES else None)
    entity_seq, untracked = _entity_seq(previous.entity_seq, fresh, seq)
    if untracked:
        log.warning(
            "Ingest %d stored rows of %d more entities that are not replicated: change_events' state names "
            "%d entities at most, so they are not tracked there (their rows are kept). Many invented object "
            "names usually mean a misbehaving landing writer: check what lands.",
            seq,
            untracked,
            MAX_TRACKED_ENTITIES,
        )
    return replace(
        previous,
        ingest_seq=seq,
        newest=newest,
        entity_seq=entity_seq,
        entities_untracked=untracked,
        last_ingested_at=now.isoformat() if moved else previous.last_ingested_at,
    )


def _entity_seq(previous: dict[str, int], fresh: pa.Table, seq: int) -> tuple[dict[str, int], int]:
    """`entity_seq` with the entities of `fresh` at `seq`: replicated ones and those already named always, a new
    unreplicated one while fewer than `MAX_TRACKED_ENTITIES` are named; and how many new ones were left out."""
    entity_seq = dict(previous)
    if not fresh.num_rows:
        return entity_seq, 0
    typed = pc.fill_null(fresh["typed"], False) if "typed" in fresh.column_names else pa.repeat(True, fresh.num_rows)
    replicated = set(pc.unique(fresh.filter(typed)["entity"]).to_pylist())
    entity_seq |= dict.fromkeys(replicated | set(pc.unique(fresh["entity"]).to_pylist()) & set(previous), seq)
    others = sorted(set(pc.unique(fresh.filter(pc.invert(typed))["entity"]).to_pylist()) - set(entity_seq))
    room = max(MAX_TRACKED_ENTITIES - len(entity_seq), 0)
    entity_seq |= dict.fromkeys(others[:room], seq)
    return entity_seq, len(others[room:])


def holders(ce_state: IngestState, replicated: set[str]) -> set[str]:
    """The replicas that may hold rows of the newest transaction: its entities that replicate, or every replica
    when they are unknown (more than `MAX_TRACKED_ENTITIES`)."""
    newest = ce_state.newest
    if newest is None:
        return set()
    return replicated & set(newest.entities) if newest.entities is not None else set(replicated)


@dataclass(frozen=True)
class Cut:
    """What every replica step of one run applies: change rows ingested through `through`, except those of
    `open_key` (held back); decided at `clock`."""

    through: int
    open_key: str | None
    clock: str
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def decide(
    ce_state: IngestState, close_after: float, clock: datetime, *, in_run: set[str], replicated: set[str]
) -> Cut:
    """The run's cut. The newest transaction stays open by the timeout rule, and also when some replica that may
    hold rows of it (its entities, or every replica if unknown) is not in the run."""
    through, newest = ce_state.ingest_seq, ce_state.newest
    key = open_transaction(ce_state, close_after, clock)
    reason = f"no newer event for less than {close_after:g} s" if key else ""
    if key is None and newest and (missing := sorted(holders(ce_state, replicated) - in_run)):
        key, reason = newest.transaction_key, f"replicas {', '.join(missing)} that hold it are not in this run"
    return Cut(through=through, open_key=key, clock=clock.isoformat(), reason=reason)


def held_back(rows: pa.Table, open_key: str | None) -> tuple[pa.Array, Held | None]:
    """Which change rows a replica holds back (those of the run's open transaction), and what it records of them."""
    if not open_key:
        return pa.repeat(False, rows.num_rows), None
    mask = pc.equal(rows["transaction_key"], open_key)
    if not pc.any(mask).as_py():
        return mask, None
    return mask, Held(transactions=[open_key], from_seq=int(pc.min(rows.filter(mask)["_ingest_seq"]).as_py()))


def overflows(rows: pa.Table) -> pa.Array:
    """Change rows that are overflow markers: Salesforce dropped changes it cannot name record by record."""
    return pc.or_(pc.equal(rows["change_type"], "GAP_OVERFLOW"), pc.ends_with(rows["record_id"], "*"))


def pending_resync(rows: pa.Table, overflow: pa.Array, state: ReplicaState) -> ResyncPending | None:
    """The resync the `overflow` rows leave pending: the one already pending, else one from the first overflow
    committed after the last resync's snapshot (older ones are covered by it); None if none is. A pending resync
    only damaged landing files asked for counts the damaged files of new overflows, and the first overflow of
    another cause makes it an ordinary one (replication/damaged.py)."""
    pending = state.resync_pending
    if pending and not pending.damaged:
        return pending
    if state.resynced:
        at = pa.scalar(datetime.fromisoformat(state.resynced.at), UTC_US)
        overflow = pc.and_(overflow, pc.invert(pc.less_equal(rows["commit_ts"], at)))
    if not pc.any(overflow).as_py():
        return pending
    new = rows.filter(overflow)
    damaged = damaged_behind(new, pending.damaged if pending else None)
    if pending:
        return replace(pending, damaged=damaged, reason=_overflow_reason(pending.since, damaged))
    since = pc.min(new["commit_ts"]).as_py().isoformat()
    return ResyncPending(
        since=since,
        from_seq=int(pc.min(new["_ingest_seq"]).as_py()),
        reason=_overflow_reason(since, damaged),
        damaged=damaged,
    )


def _overflow_reason(since: str, damaged: DamagedFiles | None) -> str:
    at = datetime.fromisoformat(since).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    files = f" from {damaged.count} damaged landing file{'s' * (damaged.count != 1)}" if damaged else ""
    return f"GAP_OVERFLOW at commit {at}Z{files}"


def resynced(state: ReplicaState, now: datetime) -> Resynced:
    """What a resync (or initial load) run at `now` records, after `state`: why it ran, and when the last resync only
    damaged landing files asked for ran (this one, or the one `state` remembers)."""
    pending, last = state.resync_pending, state.resynced
    return Resynced(
        at=now.isoformat(),
        reason=pending.reason if pending else "initial load",
        damaged_at=now.isoformat() if pending and pending.damaged else last.damaged_at if last else None,
    )


def replay_from(state: ReplicaState, applied: int | None) -> int:
    """The first ingest a resync's snapshot replays events from: every event since the pending overflow (all of
    them for an initial load, `applied` None: no table), else those after the checkpoint; held rows too."""
    if applied is None:
        start = 1
    elif state.resync_pending:
        start = state.resync_pending.from_seq
    else:
        start = applied + 1
    return min(start, state.held.from_seq) if state.held else start
