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
  - name: Campaign                   # an object without CDC: polled through SystemModstamp (cdc_assets/poll.py)
    mode: poll                       # cdc (default) | poll
    poll_interval: 300               # seconds between polls (one sensor per polled object)
    poll_overlap: 300                # seconds re-read behind the cursor each poll (rows committed late)
    hard_delete_check_every: 86400   # seconds between Id comparisons with the org (purged records)
    # also poll_rest_max_records (2000) and poll_page_size (50000); under `options`, any of these keys is the
    # default for every polled object
```
Paths are relative to the YAML file. `CDC_CONFIG` names the file (default `replication.yaml`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cdc_assets.changefeed_config import ChangefeedConfig, changefeed_config
from spark_ops.schema import DEFAULT_BUCKET_CHARS, ObjectSchema


MODES = ("cdc", "poll")


@dataclass(frozen=True)
class PollOptions:
    """How a `mode: poll` object is polled (seconds; see cdc_assets/poll.py)."""

    interval: float = 300.0
    overlap: float = 300.0
    hard_delete_check_every: float = 86400.0
    rest_max_records: int = 2000  # a delta below this many rows is read with one REST query, else Bulk API 2.0
    page_size: int = 50_000       # Bulk API 2.0 result page (one Delta commit each)


@dataclass(frozen=True)
class SObjectConfig:
    name: str
    describe_path: Path | None = None
    bucket_chars: int = DEFAULT_BUCKET_CHARS
    mode: str = "cdc"
    poll: PollOptions = field(default_factory=PollOptions)
    changefeed: ChangefeedConfig | None = None  # cdc_assets/changefeed_config.py

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


def _mode(path: Path, entry: dict) -> str:
    mode = entry.get("mode", "cdc")
    if mode not in MODES:
        raise ValueError(f"{path}: object {entry['name']}: mode must be one of {MODES}, not {mode!r}")
    return mode


# PollOptions attribute -> its key in an object's entry or in `options` (the default for every polled object)
POLL_KEYS = {"interval": "poll_interval", "overlap": "poll_overlap",
             "hard_delete_check_every": "hard_delete_check_every", "rest_max_records": "poll_rest_max_records",
             "page_size": "poll_page_size"}


def _poll_options(entry: dict, options: dict) -> PollOptions:
    """Each poll option from the object's entry, else from `options`, else PollOptions' default."""
    values = {}
    for attr, key in POLL_KEYS.items():
        default = getattr(PollOptions, attr)
        values[attr] = type(default)(entry.get(key, options.get(key, default)))
    return PollOptions(**values)


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
            mode=_mode(path, entry),
            poll=_poll_options(entry, options),
            changefeed=changefeed_config(entry, options, base=path.parent),
        ))
    names = [o.name for o in objects]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: an object is listed twice in objects: {names}")
    return ReplicationConfig(tuple(objects), float(options.get("transaction_close_after", 60)),
                             bool(options.get("initial_load", True)), options)
