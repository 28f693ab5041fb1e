"""The `changefeed:` section of replication.yaml: which replicas export a changefeed, where, and in what shape.

```yaml
options:
  changefeed:                  # the default for every object; without it (and without a per-object section) no feed
    uri: changefeed            # folder (relative to the YAML file) or object-store URI; one sub-folder per object
    mode: NEW_AND_OLD_IMAGES   # KEYS_ONLY | UPDATES | NEW_IMAGE | OLD_IMAGE | NEW_AND_OLD_IMAGES (YDB semantics)
    format: json               # json (YDB JSON) | debezium_json (needs NEW_AND_OLD_IMAGES)
    initial_scan: false        # true: the first export also emits every live row of the replica (op r)
    max_versions_per_file: 100 # replica versions per feed file
    batch_rows: 200000         # CDF / scan rows in memory at once (bounds an export's memory)
objects:
  - name: Account
    changefeed: {mode: KEYS_ONLY}   # overrides the defaults for this object, key by key; `false` turns it off
```
`CDC_CHANGEFEED` (environment) is the default `uri` when the YAML names none. The section is a model of the
validated config (replication/config.py): an unknown key or a wrong value is an error naming it. Semantics:
cdc_assets/changefeed/export.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Mode = Literal["KEYS_ONLY", "UPDATES", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"]
Format = Literal["json", "debezium_json"]
MODES: tuple[str, ...] = get_args(Mode)
FORMATS: tuple[str, ...] = get_args(Format)


class ChangefeedConfig(BaseModel):
    """`changefeed`: a replica's feed of its changes as JSON lines (YDB CDC semantics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str | None = Field(
        None,
        description=(
            "Folder (relative to the YAML file) or object-store URI of the feeds, one sub-folder per object; "
            "default CDC_CHANGEFEED, else `changefeed`."
        ),
    )
    mode: Mode = Field(
        "NEW_AND_OLD_IMAGES",
        description=("KEYS_ONLY, UPDATES (changed columns), NEW_IMAGE, OLD_IMAGE or NEW_AND_OLD_IMAGES (any case)."),
    )
    format: Format = Field(
        "json",
        description=("json (YDB JSON) or debezium_json (Debezium's key and value; only with mode NEW_AND_OLD_IMAGES)."),
    )
    initial_scan: bool = Field(
        False, description=("The first export also emits every live row of the replica (op r) at its start version.")
    )
    max_versions_per_file: int = Field(100, ge=1, description="Replica versions per feed file.")
    batch_rows: int = Field(
        200_000,
        ge=1,
        description=(
            "Change Data Feed or initial-scan rows an export holds in memory at once; a larger version (a resync) "
            "is partitioned by a hash of Id into spill files of at most this many rows and netted part by part."
        ),
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _upper(cls, mode: object) -> object:
        return mode.upper() if isinstance(mode, str) else mode

    @field_validator("format", mode="before")
    @classmethod
    def _lower(cls, fmt: object) -> object:
        return fmt.lower() if isinstance(fmt, str) else fmt

    @model_validator(mode="after")
    def _debezium_has_both_images(self) -> ChangefeedConfig:
        return self._require_both_images()

    def _require_both_images(self) -> ChangefeedConfig:
        """Debezium's envelope carries the whole row before and after every change (`before`, `after`): only
        NEW_AND_OLD_IMAGES has both. Other modes would need fields Debezium never leaves out."""
        if self.format == "debezium_json" and self.mode != "NEW_AND_OLD_IMAGES":
            raise ValueError(
                f"format debezium_json needs mode NEW_AND_OLD_IMAGES (Debezium's before and after are whole rows), "
                f"not {self.mode}: set mode: NEW_AND_OLD_IMAGES, or use format json for {self.mode}"
            )
        return self

    def over(self, default: ChangefeedConfig | None) -> ChangefeedConfig:
        """This object's section over the `options` default, key by key."""
        if default is None:
            return self
        merged = default.model_copy(update={k: getattr(self, k) for k in self.model_fields_set})
        return merged._require_both_images()  # a plain method: the validator itself is pydantic's proxy

    def located(self, base: Path) -> ChangefeedConfig:
        """With `uri` resolved: the environment's default when unset, a relative folder against the YAML's."""
        uri = self.uri or os.environ.get("CDC_CHANGEFEED") or "changefeed"
        return self.model_copy(update={"uri": uri if "://" in uri else str((base / uri).resolve())})

    def object_uri(self, name: str) -> str:
        """Where the feed of replica `name` lives: `<uri>/<Object>`."""
        return f"{(self.uri or '').rstrip('/')}/{name}"
