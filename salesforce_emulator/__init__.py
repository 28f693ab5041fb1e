"""A local Salesforce org over HTTPS that emits Change Data Capture events.

Public API: :class:`Emulator` (store + REST / composite / Bulk API 2.0 over HTTPS + CDC publisher),
:class:`FaultConfig` (gap, overflow and landing faults; long text sent as diffs) and, in
:mod:`salesforce_emulator.workload`, :class:`~salesforce_emulator.workload.Workload`. See docs/emulator.md.
"""

from salesforce_emulator.emulator import Emulator
from salesforce_emulator.faults import FaultConfig

__all__ = ["Emulator", "FaultConfig"]
