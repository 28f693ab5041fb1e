"""The naive baseline: Salesforce's guidance taken literally, one delta-rs merge per transaction, each event
folded row by row in Python (its body kept as JSON text). Shared by the catch-up and steady-state benchmarks."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


class NaiveTable:
    """One Delta table (Id, entity, body) that grows as transactions are merged into it."""

    def __init__(self, uri: Path):
        self.uri = str(uri)
        write_deltalake(
            self.uri,
            pa.table(
                {
                    "Id": pa.array([], pa.string()),
                    "entity": pa.array([], pa.string()),
                    "body": pa.array([], pa.string()),
                }
            ),
        )

    def apply(self, files: list[Path], *, seconds: float | None = None) -> tuple[int, float]:
        """Merge the transactions of `files`, one merge each (stopping after `seconds` if given);
        returns (events applied, elapsed seconds)."""
        by_tx: dict[str, list[dict]] = defaultdict(list)
        for f in files:
            for line in f.open():
                event = json.loads(line)
                by_tx[event["data"]["payload"]["ChangeEventHeader"]["transactionKey"]].append(event)
        applied, started = 0, time.perf_counter()
        for events in by_tx.values():
            rows = []
            for e in events:
                payload = e["data"]["payload"]
                header = payload["ChangeEventHeader"]
                body = json.dumps({k: v for k, v in payload.items() if k != "ChangeEventHeader"})
                rows += [{"Id": rid, "entity": header["entityName"], "body": body} for rid in header["recordIds"]]
            (
                DeltaTable(self.uri)
                .merge(pa.Table.from_pylist(rows), "t.Id = s.Id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            applied += len(events)
            if seconds is not None and time.perf_counter() - started > seconds:
                break
        return applied, time.perf_counter() - started
