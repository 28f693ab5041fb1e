"""Builders of landing lines in the Streaming API (CometD) shape, as the subscriber writes them: for tests and
benchmarks that land a few hand-made events."""

from __future__ import annotations

import itertools
import json

_replay = itertools.count(1)


def event(
    entity: str,
    change_type: str,
    ids: list[str],
    ts: int,
    tx: str | None = None,
    seq: int = 1,
    nulled: list[str] | None = None,
    diffs: list[str] | None = None,
    replay: int | None = None,
    cometd: bool = False,
    **fields,
) -> str:
    """One change event; `replay` (the replay id) defaults to the next of a process-wide counter. `cometd`: as the
    Streaming API delivers it, without `nulledFields` and `diffFields` (nulls explicit, diffs known by their
    `{"diff": ...}` shape)."""
    n = next(_replay) if replay is None else replay
    header = {
        "entityName": entity,
        "recordIds": ids,
        "changeType": change_type,
        "transactionKey": tx or f"tx{n}",
        "sequenceNumber": seq,
        "commitTimestamp": ts,
        "commitNumber": ts,
        "commitUser": "005000000000001AAA",
        "nulledFields": nulled or [],
        "diffFields": diffs or [],
        "changedFields": list(fields),
    }
    if cometd:
        del header["nulledFields"], header["diffFields"]
    return json.dumps(
        {
            "channel": "/data/ChangeEvents",
            "data": {"schema": "s", "payload": {"ChangeEventHeader": header, **fields}, "event": {"replayId": n}},
        }
    )
