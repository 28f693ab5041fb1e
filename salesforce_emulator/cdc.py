"""Turns committed transactions into Change Data Capture events in the CometD JSON shape (docs/design/contract.md §2-3).

Per transaction: one event per :class:`Change`, ``sequenceNumber`` 1..n in commit order (numbered before
filtering by enabled objects, so an event's identity never depends on configuration), all sharing the
transaction's ``transactionKey``, ``commitTimestamp`` and ``commitNumber``. Payloads follow Salesforce:

- CREATE and UNDELETE carry every non-empty field; UPDATE only the changed ones plus ``LastModifiedDate``, with
  explicit ``null`` for nulled fields (also listed in ``nulledFields``); DELETE carries no fields.
- Compound components nest under their parent (``"BillingAddress": {"City": ...}``, Contact
  ``"Name": {"FirstName": ...}``) and are named ``BillingAddress.City`` in ``changedFields`` / ``nulledFields``.
  ``Account.Name`` is a union: a business account's is the text (``"Name": "Acme"``, named ``Name``), a person
  account's its changed components (``"Name": {"LastName": ...}``, named ``Name.LastName``).
- ``IsDeleted``, ``SystemModstamp`` and formula fields never appear; hard deletes send nothing.
- With ``FaultConfig.diff_over_chars`` set, an UPDATE of a long text field may carry it as ``{"diff": ...}``
  (listed in ``diffFields``); a change naming several records does so only when they all had the same old value.

An event is built once, whole (``build_events``), and delivered in two forms. ``event_line`` keeps every header
field: the event bus the Pub/Sub API server re-encodes (``pubsub_avro.py``) reads it, and the Pub/Sub API sends
``nulledFields`` and ``diffFields`` (as bitmaps). ``cometd_line`` is what the Streaming API (CometD) delivers, the
landing files: the header without ``nulledFields`` and ``diffFields``, which CometD does not carry (Change Data
Capture Developer Guide, "Change Event Message Structure": the Pub/Sub API event "contains these ChangeEventHeader
fields: nulledfields and diffFields"; Streaming API Developer Guide, "Differences Between Change Events Received
with Streaming API vs. Pub/Sub API"). A nulled field is then an explicit ``null`` in the body, named in
``changedFields`` (CDC guide, "Change Event Body Fields", JSON messages: an UPDATE "includes empty fields only if
they are updated to an empty value (null)"), and a diff is known by its value alone: ``{"diff": "..."}`` (CDC
guide, "Data Differences in Event Fields": in a CometD client "the field contains the diff subfield").
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from salesforce_emulator.changes import Change, CommittedTransaction
from salesforce_emulator.faults import FaultConfig
from salesforce_emulator.ids import DUMMY_ID
from salesforce_emulator.schema import SObject
from salesforce_emulator.text_diff import corrupted, diff_or_value
from salesforce_emulator.values import to_event

CHANNEL = "/data/ChangeEvents"
PUBSUB_ONLY_HEADER_FIELDS = ("nulledFields", "diffFields")  # never in a CometD event's header


def _payload(obj: SObject, values: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """Event body fields (compounds nested), the changedFields names and the nulledFields names."""
    body: dict[str, Any] = {}
    changed: list[str] = []
    nulled: list[str] = []
    as_record = {f.part_of for f in obj.fields if f.part_of and f.name in values}
    for fld in obj.fields:
        if fld.name not in values or not fld.stored or fld.name in as_record:
            continue  # a person account's Name travels as its components (the union's record), never as text
        value = to_event(fld.type, values[fld.name])
        if fld.part_of:
            body.setdefault(fld.part_of, {})[fld.key or fld.name] = value
            name = f"{fld.part_of}.{fld.key or fld.name}"
        else:
            body[fld.name] = value
            name = fld.name
        changed.append(name)
        if value is None:
            nulled.append(name)
    return body, changed, nulled


def _header(
    txn: CommittedTransaction, entity: str, record_ids: list[str], change_type: str, sequence: int
) -> dict[str, Any]:
    return {
        "entityName": entity,
        "recordIds": record_ids,
        "changeType": change_type,
        "changeOrigin": txn.origin,
        "transactionKey": txn.key,
        "sequenceNumber": sequence,
        "commitTimestamp": txn.commit_ts,
        "commitNumber": txn.commit_number,
        "commitUser": txn.user_id,
        "nulledFields": [],
        "diffFields": [],
        "changedFields": [],
    }


def _envelope(obj: SObject, header: dict[str, Any], body: dict[str, Any], replay_id: int) -> dict[str, Any]:
    return {
        "channel": CHANNEL,
        "data": {
            "schema": obj.schema_id,
            "payload": {"ChangeEventHeader": header, **body},
            "event": {"replayId": replay_id},
        },
    }


def change_event(
    txn: CommittedTransaction,
    change: Change,
    sequence: int,
    faults: FaultConfig | None = None,
    rng: random.Random | None = None,
    hidden: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One change's event; `hidden` are the fields the subscriber cannot read (field-level security): left out of
    the body and of changedFields, while the schema id still names the whole object's schema."""
    obj = txn.objects[change.entity]
    header = _header(txn, change.entity, list(change.record_ids), change.change_type, sequence)
    body: dict[str, Any] = {}
    if change.change_type != "DELETE":
        body, changed, nulled = _payload(obj, {k: v for k, v in change.values.items() if k not in hidden})
        if change.change_type == "UPDATE":
            header["changedFields"], header["nulledFields"] = changed, nulled
            if faults is not None and faults.diff_over_chars is not None:
                _send_diffs(change, body, header, faults, rng or random.Random(0))
    return _envelope(obj, header, body, change.replay_id)


def _send_diffs(
    change: Change, body: dict[str, Any], header: dict[str, Any], faults: FaultConfig, rng: random.Random
) -> None:
    """Replace long text values by their diff where Salesforce would (see ``text_diff.diff_or_value``)."""
    names = sorted({name for before in change.previous.values() for name in before})
    for name in names:
        if name not in body:
            continue  # a field the subscriber cannot read
        olds = {change.previous.get(record_id, {}).get(name) for record_id in change.record_ids}
        if len(olds) != 1:
            continue  # one event for records whose old values differ: no single diff fits them all
        old, new = olds.pop(), change.values.get(name)
        diff = diff_or_value(old, new, faults.diff_over_chars or 0)
        if diff is None:
            continue
        if faults.diff_corrupt_fraction and rng.random() < faults.diff_corrupt_fraction:
            diff = corrupted(old, new, rng.choice(["hash", "base"]))  # type: ignore[arg-type]
        body[name] = {"diff": diff}
        header["diffFields"].append(name)


def gap_event(txn: CommittedTransaction, change: Change, sequence: int, overflow: bool = False) -> dict[str, Any]:
    kind = "GAP_OVERFLOW" if overflow else f"GAP_{change.change_type}"
    record_ids = [DUMMY_ID] if overflow else list(change.record_ids)
    obj = txn.objects[change.entity]
    return _envelope(obj, _header(txn, change.entity, record_ids, kind, sequence), {}, change.replay_id)


def build_events(
    txn: CommittedTransaction,
    enabled: Callable[[str], bool],
    faults: FaultConfig,
    rng: random.Random,
    hidden: Callable[[str], frozenset[str]] = lambda entity: frozenset(),
) -> list[dict[str, Any]]:
    """The events this transaction publishes, in order, whole (``event_line``, ``cometd_line``)."""
    events: list[dict[str, Any]] = []
    record_changes = 0
    overflowed: set[str] = set()
    for sequence, change in enumerate(txn.changes, start=1):
        record_changes += len(change.record_ids)
        if not enabled(change.entity):
            continue
        if record_changes > faults.overflow_threshold:
            if change.entity not in overflowed:
                overflowed.add(change.entity)
                events.append(gap_event(txn, change, sequence, overflow=True))
            continue
        event = change_event(txn, change, sequence, faults, rng, hidden(change.entity))
        too_big = faults.gap_over_bytes is not None and len(event_line(event).encode()) > faults.gap_over_bytes
        if too_big or (faults.gap_fraction and rng.random() < faults.gap_fraction):
            event = gap_event(txn, change, sequence)
        events.append(event)
    return events


def event_line(event: dict[str, Any]) -> str:
    """The whole event as one JSON line (every header field): the form the Pub/Sub API server encodes."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def cometd_line(event: dict[str, Any]) -> str:
    """The event as the Streaming API (CometD) delivers it: no ``nulledFields``, no ``diffFields`` in its header."""
    payload = event["data"]["payload"]
    header = {k: v for k, v in payload["ChangeEventHeader"].items() if k not in PUBSUB_ONLY_HEADER_FIELDS}
    data = {**event["data"], "payload": {**payload, "ChangeEventHeader": header}}
    return event_line({**event, "data": data})
