"""Fault knobs that reproduce what Salesforce and the delivery path really do (docs/design/contract.md §6-7).

- ``gap_fraction``: that fraction of change events is replaced by a header-only ``GAP_<type>`` event (Salesforce
  sends gap events when it cannot produce the change event, e.g. for changes made outside the app server).
- ``gap_over_bytes``: events larger than this many bytes become gap events (Salesforce's 1 MB event limit).
- ``overflow_threshold``: a transaction with more record changes than this sends the first ones as events and
  then one ``GAP_OVERFLOW`` per entity (100,000 in Salesforce).
- ``duplicate_file_fraction``: that fraction of landing files is published twice (at-least-once delivery).
- ``late_file_fraction``: that fraction of files is held back and published after ``late_after_files`` later
  files (or at the next ``flush_cdc()``), out of name order.
- ``diff_over_chars``: not a fault but Salesforce behaviour, on by default at Salesforce's own threshold (1,000):
  an UPDATE of a long text field (textarea) whose old and new values both have at least this many characters
  sends the field as ``{"diff": "<unified diff>"}`` (over the Pub/Sub API: the diff text) and lists it in
  ``diffFields``, unless the diff is not shorter than the new value (then the whole value, as Salesforce does).
  ``None`` never sends diffs. See ``text_diff.py``.
- ``diff_corrupt_fraction``: that fraction of those diffs is one a subscriber must refuse: half with a wrong
  SHA-256 in the ``+++`` line, half made against another base (its hunks do not match the stored value).
- ``poison_events``: Pub/Sub API only, off by default (a real org does not corrupt events, but a subscriber must
  survive one): replay id -> how the server spoils that event when it sends it. ``"body"``: the Avro payload is
  cut right after the ``ChangeEventHeader`` (the header still reads, the body does not); ``"payload"``: every
  byte garbled (nothing reads); ``"schema"``: the event names a schema id ``GetSchema`` answers ``NOT_FOUND``;
  ``"timestamp"`` / ``"entity"``: everything decodes, but the header's ``commitTimestamp`` is in nanoseconds or
  its ``entityName`` is not an API name. See ``pubsub_faults.py``.
- ``opaque_replay_ids``: not a fault, off by default: the Pub/Sub API issues replay ids as variable-length
  opaque bytes instead of 8-byte big-endian longs (the protocol promises only bytes). See ``pubsub_faults.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

POISON_KINDS = ("body", "payload", "schema", "timestamp", "entity")

SALESFORCE_DIFF_OVER_CHARS = 1000


@dataclass
class FaultConfig:
    gap_fraction: float = 0.0
    gap_over_bytes: int | None = None
    overflow_threshold: int = 100_000
    duplicate_file_fraction: float = 0.0
    late_file_fraction: float = 0.0
    late_after_files: int = 2
    diff_over_chars: int | None = SALESFORCE_DIFF_OVER_CHARS
    diff_corrupt_fraction: float = 0.0
    poison_events: dict[int, str] = field(default_factory=dict)
    opaque_replay_ids: bool = False
    seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("gap_fraction", "duplicate_file_fraction", "late_file_fraction", "diff_corrupt_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultConfig.{name} must be between 0 and 1, got {value}")
        if self.overflow_threshold < 1:
            raise ValueError("FaultConfig.overflow_threshold must be at least 1")
        if self.diff_over_chars is not None and self.diff_over_chars < 1:
            raise ValueError("FaultConfig.diff_over_chars must be at least 1 (or None: never send diffs)")
        if bad := {r: k for r, k in self.poison_events.items() if k not in POISON_KINDS}:
            raise ValueError(f"FaultConfig.poison_events: unknown kinds {bad}; use one of {', '.join(POISON_KINDS)}")
