"""The feeds' one clock: virtual timestamps `[step, txId]` every replica's feed shares, and resolved timestamps.

YDB stamps a change with `[step, txId]` from one global coordinator, so the feeds of different tables can be
merged in commit order; a resolved timestamp says every change up to it has been emitted. A replica version is a
per-table counter and cannot play that part. What every replica does share is **change_events' ingest sequence**
(`_ingest_seq`, one number per ingest commit, replication/ingest.py): every Salesforce transaction reaches every
replica through it, and a replica commit records how far it applied (`ReplicaState.applied_through`).

**The step of a change.**
- A change applied from a Salesforce transaction (its row's `_sf_commit_number` is in change_events): step = the
  highest `_ingest_seq` of that transaction's events over *all* entities (the ingest at which the transaction was
  whole in change_events), txId = its commit number. The Account and Contact rows of one transaction get the same
  ts, whichever replica run applied them.
- A change no transaction made (a snapshot, resync, reconcile, poll, a gap's placeholder, a hard delete): step =
  the `applied_through` of the replica commit that wrote it, txId = 0.
- Either is raised to the *floor* of its version, `max(R_{v-1} + 1, A_{v-1})`: one above the feed's resolved
  step before it (a feed never emits a change at or below a step it has resolved: a resync replaying old events)
  and at least the highest `applied_through` before it. The second keeps a key's changes in ts order: a
  transaction a replica held back while it applied an older one through ingest S is stamped at least S when it
  is applied, as every replica that held it in the same run cut stamps it. Only events a late landing file
  brings (a closed transaction's, ingested after newer ones) can still get a ts lower than an earlier change of
  the same key; ties in step are ordered by txId, then feed order.

**Resolved.** After replica version v the feed has resolved step `R_v = max(R_{v-1}, C_v)` with
`C_v = applied_through_v`, or `held.from_seq - 1` when the commit holds back an open transaction (its rows from
that ingest on may come later). Every transaction with step <= C_v that touches the object was applied at or
before v (closed ones through `applied_through`, never the held one), and anything emitted later has a step
above R by the raise above, so "every change with step <= R is in the feed" holds by construction. Commits
without replica state (a table property, OPTIMIZE) keep the previous version's values. A reader that takes
`R = min` of several feeds' resolved steps and every record with step <= R has every transaction whole
(replication/changefeed/reader.py `read_consistent`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from replication.state import REPLICA_STATE
from resources.delta import CHANGE_EVENTS, DeltaWarehouse


@dataclass(frozen=True)
class VersionTime:
    """What the clock knows of one replica version."""

    version: int
    commit_ms: int  # Delta commit time
    applied_through: int  # change_events ingest the replica had applied through at this version
    resolvable: int  # C_v: every transaction with a step <= it is applied at or before this version


def _positions(state: dict) -> tuple[int, int]:
    """(applied_through, C_v) of one replica state."""
    applied = int(state.get("applied_through") or 0)
    held = state.get("held")
    return applied, (min(applied, int(held["from_seq"]) - 1) if held else applied)


def replica_times(table: DeltaTable, first: int, *, floor: int, state: dict | None = None) -> dict[int, VersionTime]:
    """`VersionTime` of every version from `first` to the table's latest (from the commit metadata). A version
    without replica state keeps the previous one's values; before the first that has one: `state` (the replica
    state in force at `first`, when known) else `floor` (the feed's resolved step: nothing new)."""
    history = sorted(table.history(table.version() - first + 1), key=lambda h: h["version"])
    times = {}
    applied, resolvable = _positions(state) if state else (floor, floor)
    for commit in history:
        if int(commit["version"]) < first:
            continue
        if (raw := commit.get(REPLICA_STATE)) is not None:
            applied, resolvable = _positions(json.loads(raw))
        times[int(commit["version"])] = VersionTime(
            int(commit["version"]), int(commit["timestamp"]), applied, resolvable
        )
    return times


def resolved_after(times: dict[int, VersionTime], last: int, previous: int) -> list[int]:
    """`[R_v for v in sorted(times) if v <= last]` accumulated from `previous` (R before the first version)."""
    out, r = [], previous
    for v in sorted(t for t in times if t <= last):
        r = max(r, times[v].resolvable)
        out.append(r)
    return out


def transaction_steps(warehouse: DeltaWarehouse, entity: str, commit_numbers: list[int]) -> dict[int, tuple[str, int]]:
    """Commit number -> (Salesforce transaction key, step) of the transactions that wrote `entity`'s rows with those
    numbers; step: the highest ingest sequence of any event of the transaction, whatever its entity."""
    events = warehouse.table(CHANGE_EVENTS) if commit_numbers else None
    if events is None:
        return {}
    own = warehouse.read(
        events,
        partitions=[("entity", "=", entity)],
        columns=["commit_number", "transaction_key", "_ingest_seq"],
        filter=pc.field("commit_number").isin(commit_numbers),
        prune=[("commit_number", ">=", min(commit_numbers)), ("commit_number", "<=", max(commit_numbers))],
    )
    if not own.num_rows:
        return {}
    keys = pc.unique(own["transaction_key"].drop_null())
    every = warehouse.read(
        events,
        columns=["transaction_key", "_ingest_seq"],
        filter=pc.field("transaction_key").isin(keys),
        prune=[("_ingest_seq", ">=", pc.min(own["_ingest_seq"]).as_py())],
    )
    step = dict(
        zip(
            *every.group_by("transaction_key")
            .aggregate([("_ingest_seq", "max")])
            .select(["transaction_key", "_ingest_seq_max"])
            .to_pydict()
            .values()
        )
    )
    return {
        n: (k, int(step[k]))
        for n, k in zip(own["commit_number"].to_pylist(), own["transaction_key"].to_pylist())
        if k in step
    }


def floors(times: dict[int, VersionTime], previous: int, applied_before: int) -> dict[int, int]:
    """The lowest step of a change at each version (module docstring): `previous` is the feed's resolved step
    and `applied_before` the replica's `applied_through` before the first version."""
    out, r, a = {}, previous, applied_before
    for v in sorted(times):
        out[v] = max(r + 1, a)
        r, a = max(r, times[v].resolvable), max(a, times[v].applied_through)
    return out


def stamp(
    netted: pa.Table,
    times: dict[int, VersionTime],
    previous: int,
    applied_before: int,
    steps: dict[int, tuple[str, int]],
) -> pa.Table:
    """`netted` (rows of `net_changes`) with `ts_step`, `ts_tx` and `txid`, ordered by (version, step, txId, Id):
    the module docstring's rules."""
    floor = floors(times, previous, applied_before)
    numbers = (
        netted["_sf_commit_number__post"]
        if "_sf_commit_number__post" in netted.column_names
        else pa.nulls(netted.num_rows, pa.int64())
    ).to_pylist()
    step_of, tx_of, txid = [], [], []
    for version, number in zip(netted["version"].to_pylist(), numbers):
        found = steps.get(number) if number is not None else None
        own = found[1] if found else times[version].applied_through
        step_of.append(max(own, floor[version]))
        tx_of.append(number if found else 0)
        txid.append(found[0] if found else None)
    netted = netted.append_column("ts_step", pa.array(step_of, pa.int64()))
    netted = netted.append_column("ts_tx", pa.array(tx_of, pa.int64()))
    netted = netted.append_column("txid", pa.array(txid, pa.string()))
    return netted.sort_by(
        [("version", "ascending"), ("ts_step", "ascending"), ("ts_tx", "ascending"), ("Id", "ascending")]
    )
