"""A landing file that lost content asks for a resync of the objects it names, the way an overflow does.

A line the read could not keep (not UTF-8, longer than `max_line_bytes`), the end of a truncated gzip, or a file
that could not be read at all may have held events: applying the rest and stopping there would leave the replica
missing them with nothing to repair it. Salesforce's own signal for "changes were dropped that cannot be named
record by record" is `GAP_OVERFLOW`, which the platform already turns into a full resync of the entity (docs/design/contract.md §7:
`replication/closure.py` records it as pending, the reconciliation sensor requests the resync). So each damaged file
(`ReadResult.damaged`) adds one `GAP_OVERFLOW` line per object its lost content names, or per replicated object when
that is unknown, in the subscriber's marker shape (`shared/markers.py`). They are parsed, deduplicated and
committed with the batch's lines, so a crash before the commit leaves nothing of them. Their source is line 0 of
`_damaged/<path>`, not of the file itself: the parse tells a file's format by its lines (spark_ops/datastream.py),
and a CometD marker among a Datastream file's lines would be quarantined as a bad Datastream line; a name starting
with `_` is never a landing file's.

- Commit time: the ingest's clock. Everything the file lost was committed before it was read, so a resync whose
  snapshot is taken after that covers the loss, and an earlier one does not.
- Identity: transaction key `damaged-file-<hash of the file's path and size, and the clock>`, one sequence number
  per object: a file damaged again later (re-landed under the same name) asks again.

**At most one such resync per object per `damaged_resync_every`** (default an hour). A writer that drops damaged
files again and again would otherwise keep objects resyncing until the org's API budget runs out, for every other
object too. A pending resync that only damaged files asked for records them (`ResyncPending.damaged`: the lines are
told by their source, `_damaged/...`, which no landing file can have, so a writer cannot pass an overflow of its own
for one); the last resync run for them alone is `Resynced.damaged_at`. `deferred_until` is the rule: such a
resync waits until `damaged_resync_every` after that one, pending (nothing is lost: it runs when the wait ends, and
replays every event since its first overflow). The replica publishes the time (`resync_deferred_until`), the
reconciliation sensor waits for it (sensors/work.py), and the check `no_pending_resync` warns until then, naming
the files. An overflow of any other cause joins the pending resync and makes it due at once: Salesforce's own is
never delayed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from replication.state import DamagedFiles, ReplicaState
from resources.landing_zone import LINES_SCHEMA, LandingFile
from shared.markers import overflow_marker

ORIGIN = "replication/damaged-landing-file"
CHANNEL = "/data/ChangeEvents"
SOURCE_PREFIX = "_damaged/"  # + the damaged file's path: the markers' source_file
EXAMPLES = 10  # damaged file paths a pending resync keeps (commit state is copied into every replica commit)


def resync_lines(
    damaged: Mapping[str, frozenset[str] | None],
    files: Iterable[LandingFile],
    *,
    replicated: Iterable[str],
    at: datetime,
) -> pa.Table:
    """`GAP_OVERFLOW` lines (`LINES_SCHEMA`, line 0 of `_damaged/<path>`) for the replicated objects each damaged
    file names, or for all of them when it is unknown (None)."""
    replicated = sorted(replicated)
    sizes = {f.path: f.size for f in files}
    commit_ms = int(at.timestamp() * 1000)
    rows: dict[str, list] = {n: [] for n in LINES_SCHEMA.names}
    for path, names in sorted(damaged.items()):
        targets = replicated if names is None else [n for n in replicated if n in names]
        key = "damaged-file-" + hashlib.sha256(f"{path}\0{sizes.get(path)}\0{commit_ms}".encode()).hexdigest()[:20]
        for sequence, entity in enumerate(targets, start=1):
            marker = overflow_marker(entity, key, sequence, commit_ms, CHANNEL, None, ORIGIN)
            for column, value in zip(LINES_SCHEMA.names, (SOURCE_PREFIX + path, 0, json.dumps(marker))):
                rows[column].append(value)
    return pa.table(rows, schema=LINES_SCHEMA)


def damaged_behind(overflows: pa.Table, known: DamagedFiles | None) -> DamagedFiles | None:
    """The damaged files behind the overflow rows `overflows`, added to `known` (those a resync pending for them
    alone already has); None when an overflow of another cause is among them."""
    sources = overflows["source_file"]
    if not pc.all(pc.fill_null(pc.starts_with(sources, SOURCE_PREFIX), False)).as_py():
        return None
    paths = sorted({s.removeprefix(SOURCE_PREFIX) for s in pc.unique(sources).to_pylist()})
    examples = known.examples if known else []
    return DamagedFiles(
        count=(known.count if known else 0) + len(paths),
        examples=[*examples, *(p for p in paths if p not in examples)][:EXAMPLES],
    )


def deferred_until(state: ReplicaState, every: float, now: datetime) -> datetime | None:
    """Until when the replica's pending resync waits (module docstring): one only damaged files asked for runs no
    sooner than `every` seconds after the last resync run for them alone. None: it is due (or none is pending)."""
    pending, resynced = state.resync_pending, state.resynced
    if pending is None or pending.damaged is None or resynced is None or resynced.damaged_at is None:
        return None
    until = datetime.fromisoformat(resynced.damaged_at) + timedelta(seconds=every)
    return until if until > now else None
