"""The `changefeed:` section of replication.yaml: which replicas export a changefeed, where, and in what shape.

```yaml
options:
  changefeed:                  # the default for every object; without it (and without a per-object section) no feed
    uri: changefeed            # folder (relative to the YAML file) or object-store URI; one sub-folder per object
    mode: NEW_AND_OLD_IMAGES   # KEYS_ONLY | UPDATES | NEW_IMAGE | OLD_IMAGE | NEW_AND_OLD_IMAGES (YDB semantics)
    format: json               # json (YDB JSON) | debezium_json
    initial_scan: false        # true: the first export also emits every live row of the replica (op r)
    max_versions_per_file: 100 # replica versions per feed file (bounds an export's memory)
objects:
  - name: Account
    changefeed: {mode: KEYS_ONLY}   # overrides the defaults for this object; `changefeed: false` turns it off
```
`CDC_CHANGEFEED` (environment) is the default `uri` when the YAML names none. Semantics: cdc_assets/changefeed.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MODES = ("KEYS_ONLY", "UPDATES", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES")
FORMATS = ("json", "debezium_json")
KEYS = {"uri", "mode", "format", "initial_scan", "max_versions_per_file"}


@dataclass(frozen=True)
class ChangefeedConfig:
    uri: str
    mode: str = "NEW_AND_OLD_IMAGES"
    format: str = "json"
    initial_scan: bool = False
    max_versions_per_file: int = 100

    def object_uri(self, name: str) -> str:
        """Where the feed of replica `name` lives: `<uri>/<Object>`."""
        return f"{self.uri.rstrip('/')}/{name}"


def _resolve_uri(uri: str, base: Path) -> str:
    return uri if "://" in uri else str((base / uri).resolve())


def changefeed_config(entry: dict, options: dict, *, base: Path) -> ChangefeedConfig | None:
    """The object's feed: its own `changefeed` section over `options.changefeed`; None when it has no feed."""
    default, own = options.get("changefeed"), entry.get("changefeed")
    if own is False or (own is None and not default):
        return None
    values = {**(default if isinstance(default, dict) else {}), **(own if isinstance(own, dict) else {})}
    where = f"object {entry['name']}: changefeed"
    if unknown := set(values) - KEYS:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(KEYS)}")
    uri = values.get("uri") or os.environ.get("CDC_CHANGEFEED") or "changefeed"
    config = ChangefeedConfig(
        uri=_resolve_uri(str(uri), base),
        mode=str(values.get("mode", ChangefeedConfig.mode)).upper(),
        format=str(values.get("format", ChangefeedConfig.format)).lower(),
        initial_scan=bool(values.get("initial_scan", False)),
        max_versions_per_file=int(values.get("max_versions_per_file", ChangefeedConfig.max_versions_per_file)),
    )
    if config.mode not in MODES:
        raise ValueError(f"{where}: mode must be one of {MODES}, not {config.mode!r}")
    if config.format not in FORMATS:
        raise ValueError(f"{where}: format must be one of {FORMATS}, not {config.format!r}")
    if config.max_versions_per_file < 1:
        raise ValueError(f"{where}: max_versions_per_file must be at least 1")
    return config
