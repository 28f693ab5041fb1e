"""Named fault-injection points, for crash tests and the fault suite.

`CDC_FAULT_POINT=<name>` makes the named point fail: `CDC_FAULT_ACTION=raise` (default) raises, `kill` sends
SIGKILL to this process (a real crash: no cleanup, no finally blocks). Unset, a point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal


class InjectedFault(RuntimeError):
    pass


def fault_point(name: str) -> None:
    if os.environ.get("CDC_FAULT_POINT") != name:
        return
    if os.environ.get("CDC_FAULT_ACTION", "raise") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(f"fault injected at {name} (CDC_FAULT_POINT)")
