"""The checkpoint state kept in Delta commits (docs/design/contract.md §5), typed: what each table's commits remember,
one place.

A re-run reads what the previous commit of a table stored besides its data; nothing lives outside the table. Each
kind of state is a dataclass with its fields named and documented here, stored as JSON in the commit metadata
under its `KEY`, and located through an app transaction (`resources/delta.py`, "Finding the state"):

- `ReplicaState` (`cdc.replica`, every commit of a replica): how far it applied, the transaction it holds back, a
  pending resync, the last resync/reconcile, the newest change applied, the poll cursor of a polled object, the
  history versions an apply commit staged (`HistoryMark`), the org its records come from (`OrgIdentity`);
- `HistoryState` (`cdc.history`, every commit of a history table): which replica versions it holds;
- `FormulaState` (`cdc.formulas`, the replica commits of formula refreshes: replication/formulas/refresh.py): when
  the last refresh and full pass read the org, the Bulk job being read;
- `IngestState` (`cdc.change_events`, every change_events commit): the ingest sequence number and what the close
  rule reads (`replication/closure.py`);
- `QuarantineState` (`cdc.quarantine`, `cdc.quarantine.apply`: the run that quarantined lines) and
  `QuarantineAck` (`cdc.quarantine_ack`: lines reviewed up to `until`).

`to_dict` / `from_dict` are the one JSON form: field names are the JSON keys, nested states are objects, a field
a commit lacks takes its default, and a key no field names is ignored. What is *derived* from the table's rows or
log (row and dirty counts, `replication/counts.py`) is not state: a counter kept beside the rows could only drift
from them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from deltalake import DeltaTable

from resources.delta import DeltaWarehouse

REPLICA_STATE = "cdc.replica"
HISTORY_STATE = "cdc.history"
FORMULA_STATE = "cdc.formulas"
CE_STATE = "cdc.change_events"
Q_STATE = "cdc.quarantine"  # quarantined by ingest
Q_APPLY_STATE = "cdc.quarantine.apply"  # quarantined at apply time (replication/describe_drift.py)
QUARANTINE_ACK = "cdc.quarantine_ack"  # also the app transaction id of an acknowledgement (replication/quarantine.py)


def _decode(kind, value):
    """`value` (from JSON) as an instance of the annotated type `kind` (dataclasses nested; anything else as is)."""
    if value is None:
        return None
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kinds = [k for k in typing.get_args(kind) if k is not type(None)]
        kind = kinds[0] if len(kinds) == 1 else object
    if isinstance(kind, type) and issubclass(kind, _State) and isinstance(value, dict):
        return kind.from_dict(value)
    return value


class _State:
    """JSON form of a state dataclass (module docstring)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every subclass is a @dataclass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict | None) -> Self:
        """The state `raw` holds; a field it lacks (or holds as null) takes its default."""
        raw, hints = raw or {}, typing.get_type_hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            defaulted = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.name in raw and not (raw[f.name] is None and defaulted):
                values[f.name] = _decode(hints[f.name], raw[f.name])
        return cls(**values)


class _CommitState(_State):
    KEY: ClassVar[str]

    @classmethod
    def read(cls, warehouse: DeltaWarehouse, table: DeltaTable | None) -> Self:
        """The state the newest commit of `table` stored (defaults when there is none or no table)."""
        return cls.from_dict(warehouse.commit_state(table, cls.KEY))


# -- a replica (replication/apply.py, refetch.py, poll/run.py) --------------------------------------------------------------


@dataclass(frozen=True)
class Held(_State):
    """The open transaction a replica held back (docs/design/contract.md §5): its rows from ingest `from_seq` on are
    read again."""

    transactions: list[str]
    from_seq: int


@dataclass(frozen=True)
class DamagedFiles(_State):
    """Damaged landing files that asked a resync (replication/damaged.py): how many, and the first few paths."""

    count: int
    examples: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResyncPending(_State):
    """An overflow the replica could not apply: a full resync replays every event from ingest `from_seq`."""

    since: str  # commit time of the first overflow (ISO)
    from_seq: int
    reason: str
    # Set while only damaged landing files asked for it: it waits out `damaged_resync_every` (replication/damaged.py).
    damaged: DamagedFiles | None = None


@dataclass(frozen=True)
class Resynced(_State):
    """The last resync (or initial load): overflows committed at or before `at` are covered by its snapshot."""

    at: str
    reason: str
    damaged_at: str | None = None  # the last resync only damaged landing files asked for (ISO; this one or earlier)


UNKNOWN_ID_EXAMPLES = 10  # ids a reconcile keeps as examples of those the org refused or does not know


@dataclass(frozen=True)
class Reconciled(_State):
    """The last reconcile (replication/refetch.py): when, how many dirty records it fetched, and the ids it took out of
    the dirty set without a record: `unknown` the org does not know, `refused` it rejects as malformed (a few of
    each as examples, a refused one with the org's error)."""

    at: str
    records: int
    unknown: int = 0
    unknown_examples: list[str] = field(default_factory=list)
    refused: int = 0
    refused_examples: list[str] = field(default_factory=list)


@dataclass(frozen=True, order=True)
class PollPosition(_State):
    """A polled row's position: SystemModstamp (ISO, microseconds), then Id (ties)."""

    ts: str
    id: str


@dataclass(frozen=True)
class BulkJob(_State):
    """A Bulk API 2.0 queryAll job being read page by page (a killed run resumes from `locator`)."""

    id: str | None
    locator: str | None
    where: str | None
    hash: str
    records: int = 0
    max: PollPosition | None = None  # the newest position read so far


@dataclass(frozen=True)
class RefusedDeletes(_State):
    """An Id comparison that would have soft-deleted more than `poll_max_delete_share` of the live records, refused
    (replication/poll/compare.py): nothing was deleted; a run with `confirm_deletes` applies it."""

    at: str
    records: int  # live replica records the org did not return
    live: int  # live replica records compared
    max_share: float


@dataclass(frozen=True)
class PollState(_State):
    """The cursor of a polled object (replication/poll/run.py) and what its last Id comparison found (compare.py)."""

    cursor: PollPosition | None = None
    job: BulkJob | None = None
    ids_compared_at: str | None = None
    hard_deleted: int = 0
    active: bool = True  # false after the hand-off run of an object switched to cdc
    late_found: int = 0  # records the last Id comparison found missing (committed later than the overlap)
    refused: RefusedDeletes | None = None  # the last Id comparison's deletes, refused (too many)
    cursor_field: str | None = None  # the field the cursor is a position in (SystemModstamp, LastModifiedDate, ...)


@dataclass(frozen=True)
class HistoryMark(_State):
    """An apply commit's history versions (replication/history/): staged in `file` (None: it made none) before the
    commit. `version` is the replica version of the commit that stored the mark: a later commit that copies its
    predecessor's state (a reconcile's `replace(prev, ...)`) carries a mark of another version, which is ignored."""

    version: int
    file: str | None = None
    versions: int = 0


@dataclass(frozen=True)
class OrgIdentity(_State):
    """The org a replica's records come from (replication/org.py): its id (userinfo `organization_id`), and the
    instance URL and API version it was last read through (either may change for the same org)."""

    org_id: str
    instance_url: str
    api_version: str


@dataclass(frozen=True)
class ReplicaState(_CommitState):
    """What every commit of a replica stores besides its rows. The apply checkpoint itself is the app transaction
    `cdc_apply` (replication/apply.py); `applied_through` repeats it for readers of the metadata."""

    KEY: ClassVar[str] = REPLICA_STATE
    applied_through: int = 0
    held: Held | None = None
    resync_pending: ResyncPending | None = None
    resynced: Resynced | None = None
    reconciled: Reconciled | None = None
    last_commit_ts: str | None = None  # the newest `_sf_commit_ts` written (ISO)
    synced_at: str | None = None  # when the commit's run started: rows it wrote have `_sf_synced_at` >= it
    run_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    poll: PollState | None = None
    history: HistoryMark | None = None  # objects with `history: true`: this commit's versions (replication/history/)
    org: OrgIdentity | None = None  # the org its records come from (None: not read since this was recorded)

    def with_commit_ts(self, latest: str | None) -> ReplicaState:
        """This state with `last_commit_ts` moved forward to `latest` (never back)."""
        return dataclasses.replace(self, last_commit_ts=max(filter(None, [self.last_commit_ts, latest]), default=None))


# -- a history table (replication/history/) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryState(_CommitState):
    """What every commit of a history table `<Object>__history` stores: replica versions below `through` are in it
    (also the app transaction `cdc_history`)."""

    KEY: ClassVar[str] = HISTORY_STATE
    through: int = 0
    versions: int = 0  # versions this commit added
    backfilled: bool = False  # made by a backfill (history turned on for an existing replica)
    run_id: str | None = None


# -- formula refreshes of a replica (replication/formulas/refresh.py) ----------------------------------------------


@dataclass(frozen=True)
class FormulaJob(_State):
    """A Bulk API 2.0 query of formula values being read (a killed run resumes it after `locator`)."""

    id: str | None
    locator: str | None
    where: str | None  # None: a full pass
    hash: str  # of the query (object, fields, where): a job of other fields is not resumed
    read_at: str  # when the job was asked for (ISO): `_sf_formulas_at` of every row it reads
    records: int = 0  # read and merged so far


@dataclass(frozen=True)
class FormulaState(_CommitState):
    """What the replica commits of formula refreshes store (their own key: the replica's other writers never carry
    it, and need not: `commit_state` finds the newest commit holding it, whatever committed since)."""

    KEY: ClassVar[str] = FORMULA_STATE
    refreshed_at: str | None = None  # `read_at` of the last refresh read to its end
    full_at: str | None = None  # `read_at` of the last full pass read to its end
    job: FormulaJob | None = None
    run_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


# -- change_events (replication/ingest.py, closure.py) ---------------------------------------------------------------


@dataclass(frozen=True)
class Newest(_State):
    """The newest event ingested (in commit order, docs/design/contract.md §4): its transaction and position
    `[commit micros, commit number, sequence number, replay id]`; `entities` that transaction touched (None: more
    than `MAX_TRACKED_ENTITIES`, replication/closure.py, so every replica may hold it)."""

    transaction_key: str
    position: list[int]
    entities: list[str] | None = None


@dataclass(frozen=True)
class IngestState(_CommitState):
    """What every change_events commit stores besides its rows."""

    KEY: ClassVar[str] = CE_STATE
    ingest_seq: int = 0  # this commit's ingest sequence number (`_ingest_seq` of its rows)
    newest: Newest | None = None
    last_ingested_at: str | None = None  # when `newest` last moved forward (the close timer, closure.py)
    entity_seq: dict[str, int] = field(default_factory=dict)  # entity -> last ingest that stored rows of it
    entities_untracked: int = 0  # unreplicated entities this ingest stored rows of but left out of entity_seq (bound)
    files: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    run_id: str | None = None


# -- _quarantine (replication/quarantine.py, checks.py) --------------------------------------------------------------


@dataclass(frozen=True)
class QuarantineState(_State):
    """The run that inserted quarantine rows (stored under `Q_STATE` or `Q_APPLY_STATE`, by who quarantined)."""

    run_id: str | None = None


@dataclass(frozen=True)
class QuarantineAck(_CommitState):
    """Quarantined lines up to `until` (ISO) are reviewed: what a reader of the table's history sees. The check reads
    the app transaction `QUARANTINE_ACK`, which holds the same instant in microseconds (cdc_assets/checks.py)."""

    KEY: ClassVar[str] = QUARANTINE_ACK
    until: str | None = None
