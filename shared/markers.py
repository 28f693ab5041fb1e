"""Header-only change events the subscriber lands itself, so the platform repairs what the stream could not carry.

- :func:`overflow_marker`: a ``GAP_OVERFLOW`` with Salesforce's dummy record id: the platform resyncs the whole
  entity from the org (docs/design/contract.md §7). Landed when a saved replay id is no longer retained, and for a dead
  letter whose records cannot be named.
- :func:`gap_marker`: the original header with ``changeType`` ``GAP_<type>``: the platform marks each record id
  dirty and reconciles it by id (docs/design/contract.md §6). Landed for a dead letter whose header is readable. It
  keeps the original ``transactionKey`` and ``sequenceNumber``, so a re-landed marker is a counted duplicate (event
  identity is entity, transaction key, sequence number and change type), and the original commit time orders it.

Both carry the channel, the schema id and the CometD ``replayId`` (null when the replay id is not 8 bytes).
"""

from __future__ import annotations

from typing import Any

from shared.names import OVERFLOW_ID

DUMMY_RECORD_ID = OVERFLOW_ID  # the record id Salesforce puts in GAP_OVERFLOW events (shared/names.py)


def _event(channel: str, schema_id: str, header: dict[str, Any], replay_long: int | None) -> dict[str, Any]:
    return {
        "channel": channel,
        "data": {"schema": schema_id, "payload": {"ChangeEventHeader": header}, "event": {"replayId": replay_long}},
    }


def overflow_marker(
    entity: str,
    transaction_key: str,
    sequence: int,
    commit_ts: int,
    channel: str,
    replay_long: int | None,
    origin: str,
    schema_id: str = "",
) -> dict[str, Any]:
    """A GAP_OVERFLOW event for ``entity``: the replica is resynced from the org, as after an overflow."""
    header = {
        "entityName": entity,
        "recordIds": [DUMMY_RECORD_ID],
        "changeType": "GAP_OVERFLOW",
        "changeOrigin": origin,
        "transactionKey": transaction_key,
        "sequenceNumber": sequence,
        "commitTimestamp": commit_ts,
        "commitNumber": 0,
        "commitUser": "",
        "nulledFields": [],
        "diffFields": [],
        "changedFields": [],
    }
    return _event(channel, schema_id, header, replay_long)


def gap_marker(
    header: dict[str, Any], channel: str, schema_id: str, replay_long: int | None, origin: str
) -> dict[str, Any]:
    """The header of an event whose body could not be read, as a ``GAP_<type>`` event for the same records."""
    change_type = str(header["changeType"]).removeprefix("GAP_")
    gap = {
        **header,
        "changeType": f"GAP_{change_type}",
        "changeOrigin": origin,
        "nulledFields": [],
        "diffFields": [],
        "changedFields": [],
    }
    return _event(channel, schema_id, gap, replay_long)
