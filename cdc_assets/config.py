"""`replication.yaml`: which Salesforce objects replicate, and how.

```yaml
options:
  transaction_close_after: 60   # seconds without a newer event before the newest transaction counts as closed
  initial_load: true            # an object's first run loads it fully through Bulk API 2.0 (needs the org)
  max_ingest_batch_bytes: 134217728  # landing files ingested per change_events commit (bounds a run's memory)
  retry_backoff_seconds: 30     # a failed run's work is requested again after this, doubling (sensors/work.py)
  retry_backoff_max_seconds: 600
  bulk_page_size: 50000         # records per Bulk API 2.0 result page in a resync / initial load (maxRecords)
objects:
  - name: Account
    describe: path/to/Account.json   # optional: describe() from a file instead of the org
    bucket_chars: 13                 # optional: Id prefix length that lays out the table (design §8)
```
Paths are relative to the YAML file. `CDC_CONFIG` names the file (default `replication.yaml`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from spark_ops.schema import DEFAULT_BUCKET_CHARS, ObjectSchema


@dataclass(frozen=True)
class SObjectConfig:
    name: str
    describe_path: Path | None = None
    bucket_chars: int = DEFAULT_BUCKET_CHARS

    def load_describe(self) -> dict | None:
        return json.loads(self.describe_path.read_text()) if self.describe_path else None

    def schema_from_file(self) -> ObjectSchema | None:
        describe = self.load_describe()
        return ObjectSchema.from_describe(describe, bucket_chars=self.bucket_chars) if describe else None


@dataclass(frozen=True)
class ReplicationConfig:
    objects: tuple[SObjectConfig, ...]
    transaction_close_after: float = 60.0
    initial_load: bool = True
    options: dict = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.objects]


def load_config(path: str | Path | None = None) -> ReplicationConfig:
    path = Path(path or os.environ.get("CDC_CONFIG", "replication.yaml")).resolve()
    raw = yaml.safe_load(path.read_text()) or {}
    options = raw.get("options") or {}
    objects = []
    for entry in raw.get("objects") or []:
        entry = {"name": entry} if isinstance(entry, str) else entry
        describe = entry.get("describe")
        objects.append(SObjectConfig(
            name=entry["name"],
            describe_path=(path.parent / describe).resolve() if describe else None,
            bucket_chars=int(entry.get("bucket_chars", options.get("bucket_chars", DEFAULT_BUCKET_CHARS))),
        ))
    names = [o.name for o in objects]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: an object is listed twice in objects: {names}")
    return ReplicationConfig(tuple(objects), float(options.get("transaction_close_after", 60)),
                             bool(options.get("initial_load", True)), options)
