"""Reading a changefeed from a saved position (the consumer side of cdc_assets/changefeed/export.py).

A position is `{"file": <feed file name>, "line": <lines of it consumed>}`: feed files are immutable once visible
and named in feed order, so "the rest of this file, then every later file" is exactly what follows a position.
A consumer saves the position of the last record it processed (atomically with its own output, ideally) and
passes it back after a restart: it then reads every later record once, nothing before it again. Resolved lines
(`{"resolved": [v, ms]}`) come through like records: after one, the consumer has seen every change at version <= v.

`replay` folds records into a dict of live rows by key: a consumer's table in memory (used by the tests to
rebuild the replica from its feed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from cdc_assets.changefeed.rows import KEY
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
        """The newest heartbeat `[version, ms]`: every change at a version <= version is in the feed."""
        heartbeat = self.store.read_resolved()
        return heartbeat["resolved"] if heartbeat else None


def _change(record: dict) -> tuple[str, str | None, dict]:
    """(key, what to do, columns) of a record in either format: `erase`, `replace` (a whole new row), `merge`
    (columns to set); None for a resolved line."""
    if "resolved" in record:
        return "", None, {}
    if "payload" in record:  # Debezium
        payload = record["payload"]
        image = {k: v for k, v in (payload["after"] or {}).items() if k != KEY}
        kind = {"d": "erase", "c": "replace", "r": "replace"}.get(payload["op"], "merge")
        return record["key"][KEY], kind, image
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
