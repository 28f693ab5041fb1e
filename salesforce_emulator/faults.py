"""Fault knobs that reproduce what Salesforce and the delivery path really do (replication design §6-7).

- ``gap_fraction``: that fraction of change events is replaced by a header-only ``GAP_<type>`` event (Salesforce
  sends gap events when it cannot produce the change event, e.g. for changes made outside the app server).
- ``gap_over_bytes``: events larger than this many bytes become gap events (Salesforce's 1 MB event limit).
- ``overflow_threshold``: a transaction with more record changes than this sends the first ones as events and
  then one ``GAP_OVERFLOW`` per entity (100,000 in Salesforce).
- ``duplicate_file_fraction``: that fraction of landing files is published twice (at-least-once delivery).
- ``late_file_fraction``: that fraction of files is held back and published after ``late_after_files`` later
  files (or at the next ``flush_cdc()``), out of name order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FaultConfig:
    gap_fraction: float = 0.0
    gap_over_bytes: int | None = None
    overflow_threshold: int = 100_000
    duplicate_file_fraction: float = 0.0
    late_file_fraction: float = 0.0
    late_after_files: int = 2
    seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("gap_fraction", "duplicate_file_fraction", "late_file_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultConfig.{name} must be between 0 and 1, got {value}")
        if self.overflow_threshold < 1:
            raise ValueError("FaultConfig.overflow_threshold must be at least 1")
