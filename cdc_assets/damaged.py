"""A landing file that lost content asks for a resync of the objects it names, the way an overflow does.

A line the read could not keep (not UTF-8, longer than `max_line_bytes`), the end of a truncated gzip, or a file
that could not be read at all may have held events: applying the rest and stopping there would leave the replica
missing them with nothing to repair it. Salesforce's own signal for "changes were dropped that cannot be named
record by record" is `GAP_OVERFLOW`, which the platform already turns into a full resync of the entity (docs/design/contract.md §7:
`cdc_assets/closure.py` records it as pending, the reconciliation sensor requests the resync). So each damaged file
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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime

import pyarrow as pa

from resources.landing_zone import LINES_SCHEMA, LandingFile
from shared.markers import overflow_marker

ORIGIN = "cdc_assets/damaged-landing-file"
CHANNEL = "/data/ChangeEvents"
SOURCE_PREFIX = "_damaged/"  # + the damaged file's path: the markers' source_file


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
