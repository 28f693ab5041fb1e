"""The demo's Salesforce org: the emulator with a generated org, and a workload changing it in the background.

By default the org serves its change events over the Pub/Sub API (gRPC) and writes no landing files: the CDC
subscriber (``python -m cdc_subscriber subscribe``, started by ``demo.main``) lands them, as against a real org.
``emulator_lands=True`` is the older shortcut: the emulator writes the landing files itself (with its duplicate and
late file faults, which only exist on that path).

The org is built once (500 accounts with their contacts, opportunities and cases, plus leads) and kept in
`.demo/org`, so a restarted demo continues the same org. The workload runs straight against the store (the REST
API stays free for the platform) at a modest rate. The fault knobs make the interesting cases happen on their
own: a gap event now and then (reconciled by the sensor), a duplicate or late file once in a while, and, rarely,
a transaction large enough to overflow (about one in six of the workload's large transactions, every few
minutes at the default rate), which triggers a full resync. The org sends what real orgs send: person accounts
(``Account.Name`` a union of text and a name record), a time field (``Contact.Best_Time_To_Call__c``) and long
text diffs at Salesforce's threshold (1,000 characters; the workload's long Descriptions and small edits of them).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload

log = logging.getLogger(__name__)

DEMO_FAULTS = FaultConfig(
    gap_fraction=0.003,  # ~1 event in 330 arrives as a GAP_* event
    overflow_threshold=350,  # large workload transactions touch 100-400 records
    duplicate_file_fraction=0.03,
    late_file_fraction=0.03,
    late_after_files=2,
    diff_over_chars=1000,  # Salesforce's own threshold for sending a long text as a diff
    seed=None,
)


def open_org(
    data_dir: Path,
    landing_dir: Path,
    *,
    port: int,
    accounts: int = 500,
    roll_seconds: float = 5.0,
    faults: FaultConfig = DEMO_FAULTS,
    emulator_lands: bool = False,
    pubsub_port: int = 7443,
    keepalive_seconds: float = 5.0,
) -> tuple[Emulator, Workload]:
    """The emulator on `port` (Pub/Sub API on `pubsub_port`) with its org (generated if new) and a workload over
    it; the server is started."""
    emu = Emulator(
        data_dir,
        landing_dir=landing_dir if emulator_lands else None,
        port=port,
        faults=faults,
        roll_seconds=roll_seconds,
        pubsub=not emulator_lands,
        pubsub_port=pubsub_port,
        keepalive_seconds=keepalive_seconds,
    )
    workload = Workload(emu, seed=int(time.time()), long_text=True, person_accounts=True)
    if not workload.live["Account"]:
        log.info("building a new org with %d accounts in %s", accounts, data_dir)
        built = workload.build_org(accounts=accounts)
        log.info("org built: %s", built)
    try:
        emu.start()
    except OSError as exc:
        emu.stop()
        raise SystemExit(
            f"cannot serve the Salesforce emulator on port {port} ({exc}); set CDC_DEMO_PORT to a free port"
        ) from exc
    return emu, workload


class WorkloadThread(threading.Thread):
    """Runs the workload at `rate` transactions per second until `stop()`."""

    def __init__(self, workload: Workload, rate: float, batch: int = 10):
        super().__init__(name="demo-workload", daemon=True)
        self.workload, self.rate, self.batch = workload, rate, batch
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.workload.run(changes=self.batch, rate=self.rate)
            except Exception:  # the demo must go on: log it and carry on with a fresh view of the org
                log.exception("workload batch failed; continuing")
                self.workload.refresh()
                self._stop_event.wait(1)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)

    @property
    def stats(self) -> dict[str, int]:
        return dict(self.workload.stats)
