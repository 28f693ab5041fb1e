"""Reading a changefeed from a saved position (the consumer side of cdc_assets/changefeed/export.py).

A position is `{"file": <feed file name>, "line": <lines of it consumed>}`: feed files are immutable once visible
and named in feed order, so "the rest of this file, then every later file" is exactly what follows a position.
A consumer saves the position of the last record it processed (atomically with its own output, ideally) and
passes it back after a restart: it then reads every later record once, nothing before it again. In YDB JSON
resolved lines (`{"resolved": [step, 0]}`) come through like records: after one, the consumer has seen every
change whose ts step is <= step. A Debezium feed holds only change records (and tombstones); its resolved steps
are in the file names and `resolved.json`.

**Several objects in commit order** (`read_consistent`): every feed's `ts` comes from one clock
(replication/changefeed/clock.py). Reading each feed's heartbeat first and then its files, R = the smallest of
their resolved steps is a consistent cut: every record with a step <= R is in the files (they are written before
the heartbeat that resolves them), so a transaction that touched several objects is in the cut in all of them or
in none. The records up to R, sorted by ts (ties: the object's name, then feed order, which keeps per-key order),
are what a consumer applies to reach the org's state at R; the next call continues after R. It holds the records
of one cut in memory.

`replay` folds records into a dict of live rows by key: a consumer's table in memory (used by the tests to
rebuild the replica from its feed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from replication.changefeed.rows import KEY
from resources.changefeed_store import FeedStore

Position = dict  # {"file": str, "line": int}


class ChangefeedReader:
    """The feed of one replica at `uri` (`<feed uri>/<Object>`)."""

    def __init__(self, uri: str):
        self.store = FeedStore(uri)

    def read(self, position: Position | None = None) -> Iterator[tuple[Position, dict]]:
        """Every record after `position` (None: from the start), each with the position that ends at it."""
        for file in self.store.files():
            if position is not None and file.name < position["file"]:
                continue
            skip = position["line"] if position is not None and file.name == position["file"] else 0
            for number, text in enumerate(self.store.lines(file.name), start=1):
                if number > skip and text:
                    yield {"file": file.name, "line": number}, json.loads(text)

    def resolved(self) -> list[int] | None:
        """The newest heartbeat `[step, 0]`: every change whose ts step is <= step is in the feed's files."""
        heartbeat = self.store.read_resolved()
        return heartbeat["resolved"] if heartbeat else None

    def version(self) -> int | None:
        """The replica version the feed has been exported through (the newest heartbeat's)."""
        heartbeat = self.store.read_resolved()
        return heartbeat.get("version") if heartbeat else None


def record_ts(record: dict) -> list[int] | None:
    """The `[step, txId]` of a change record in either format (None: a resolved line or a tombstone)."""
    if "ts" in record:
        return record["ts"]
    if record.get("value"):
        return json.loads(record["value"]["source"]["sequence"])
    return None


def read_consistent(uris: dict[str, str], after: int = -1) -> tuple[int, list[tuple[str, dict]]]:
    """The change records of several objects' feeds (`{object: feed uri}`) whose ts step is in (`after`, R], R
    the smallest resolved step among them, as (object, record) in ts order (module docstring); returns R too."""
    readers = {name: ChangefeedReader(uri) for name, uri in sorted(uris.items())}
    steps = [(r.resolved() or [-1])[0] for r in readers.values()]  # heartbeats first, then files
    cut = min(steps) if steps else -1
    found = []
    for order, (name, reader) in enumerate(readers.items()):
        for number, (_, record) in enumerate(reader.read()):
            ts = record_ts(record)
            if ts is not None and after < ts[0] <= cut:
                found.append(((ts[0], ts[1], order, number), name, record))
    found.sort(key=lambda f: f[0])
    return cut, [(name, record) for _, name, record in found]


def _change(record: dict) -> tuple[str, str | None, dict]:
    """(key, what to do, columns) of a record in either format: `erase`, `replace` (a whole new row), `merge`
    (columns to set); None for a resolved line."""
    if "resolved" in record:
        return "", None, {}
    if "value" in record:  # Debezium: the Kafka record's key and value (None: a tombstone)
        value = record["value"]
        if value is None:
            return record["key"][KEY], None, {}
        image = {k: v for k, v in (value["after"] or {}).items() if k != KEY}
        return record["key"][KEY], "erase" if value["op"] == "d" else "replace", image
    key = record["key"][0]
    if "erase" in record:
        return key, "erase", {}
    if "newImage" in record:
        return key, "replace", record["newImage"]
    return key, "merge", record["update"]  # UPDATES: the changed columns (all of them for a new row)


def replay(records, state: dict[str, dict] | None = None) -> dict[str, dict]:
    """Apply feed records to `state` (key -> row without the key), as a consumer keeping a copy would."""
    state = {} if state is None else state
    for record in records:
        key, kind, columns = _change(record)
        if kind == "erase":
            state.pop(key, None)
        elif kind == "replace":
            state[key] = dict(columns)
        elif kind == "merge":
            state.setdefault(key, {}).update(columns)
    return state
