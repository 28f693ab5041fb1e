"""The `formulas:` section of replication.yaml: which replicas keep formula fields, and how often they are read.

```yaml
objects:
  - name: Contact
    formulas:
      refresh_every: 1h      # a refresh run every hour (seconds, or a number with s, m, h or d)
      full_every: 1d         # ... of records whose SystemModstamp moved, and every day a full pass of all records
```
Off by default (no section: no formula columns). Under `options` the section is the default of every object; an
object's own section overrides it key by key, `formulas: false` turns it off. Semantics: replication/formulas/refresh.py.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from replication.api_name import ApiName

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(value: object) -> object:
    """A duration as seconds: a number, or text like `90s`, `15m`, `1h`, `1d` (anything else is left for pydantic
    to reject)."""
    if isinstance(value, str) and (match := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value.lower())):
        return float(match[1]) * _UNITS[match[2] or "s"]
    return value


class FormulasConfig(BaseModel):
    """`formulas`: formula fields as replica columns, refreshed by their own runs (change events never carry them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    refresh_every: float = Field(
        3600.0,
        gt=0,
        description=(
            "Seconds between formula refresh runs (or a duration: 15m, 1h, 1d); the check formulas_fresh fails when a "
            "live row's formula values are older than twice the longer of this and full_every."
        ),
    )
    full_every: float | None = Field(
        None,
        gt=0,
        description=(
            "Seconds between full passes that read every record's formulas; the refreshes in between read only records "
            "whose SystemModstamp moved. Default: every refresh is a full pass (cross-object formulas change without "
            "an event on the record)."
        ),
    )
    overlap: float = Field(
        300.0,
        ge=0,
        description=("Seconds an incremental refresh re-reads behind the previous one (clock skew, late commits)."),
    )
    fields: tuple[ApiName, ...] | None = Field(
        None, description=("Only these formula fields; default every formula field describe() lists.")
    )
    merge_rows: int = Field(
        1_000_000,
        gt=0,
        description=(
            "Formula rows read before they are merged into the replica, one commit each (bounds memory; a killed run "
            "resumes the Bulk job after the last commit)."
        ),
    )

    @field_validator("refresh_every", "full_every", "overlap", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return seconds(value)

    @property
    def full_interval(self) -> float:
        """Seconds between full passes (each refresh when `full_every` is unset)."""
        return max(self.full_every or self.refresh_every, self.refresh_every)

    @property
    def max_age(self) -> float:
        """The age beyond which a formula value counts as stale (check formulas_fresh): two full intervals."""
        return 2 * self.full_interval

    def over(self, default: FormulasConfig | None) -> FormulasConfig:
        """This object's section over the `options` default, key by key."""
        if default is None:
            return self
        return default.model_copy(update={k: getattr(self, k) for k in self.model_fields_set})
