"""How old a replica's formula values are: materialization metadata and the check `formulas_fresh`.

The age of a live row's formula values is the time since they were read (`_sf_formulas_at`); a live row without
any (CDC inserted it after the last refresh read the org) counts from when it was written (`_sf_synced_at`): the
next refresh must read it. The check fails when the oldest is older than twice the interval in which every value
is read again (`FormulasConfig.max_age`: two full passes), i.e. when refresh runs stopped or fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import dagster as dg
import pyarrow.compute as pc
from deltalake import DeltaTable

from cdc_assets.names import META_FORMULAS_AGE, META_FORMULAS_MISSING
from object_schema.describe import FORMULAS_AT
from replication.formulas.config import FormulasConfig
from resources.delta import read_table

FORMULAS_FRESH = "formulas_fresh"
DESCRIPTION = (
    "Every live row's formula values were read from the org less than twice the full-pass interval "
    "ago (replication.yaml formulas: refresh_every, full_every): formula refresh runs keep up."
)


@dataclass(frozen=True)
class FormulaAge:
    live: int  # live rows
    missing: int  # live rows without formula values yet
    oldest: datetime | None  # the oldest read (or, for a row without values, write) among live rows

    def seconds(self, now: datetime) -> float:
        return (now - self.oldest).total_seconds() if self.oldest else 0.0


def formula_age(table: DeltaTable | None) -> FormulaAge:
    """The age of the replica's oldest live formula value (module docstring): two columns read, plus the flag."""
    if table is None:
        return FormulaAge(0, 0, None)
    has_values = FORMULAS_AT in table.schema().to_arrow().names
    rows = read_table(table, columns=["_sf_deleted", "_sf_synced_at", *([FORMULAS_AT] if has_values else [])])
    rows = rows.filter(pc.invert(pc.fill_null(rows["_sf_deleted"], False)))
    if has_values:
        missing, at = rows[FORMULAS_AT].null_count, pc.coalesce(rows[FORMULAS_AT], rows["_sf_synced_at"])
    else:
        missing, at = rows.num_rows, rows["_sf_synced_at"]
    return FormulaAge(rows.num_rows, missing, pc.min(at).as_py() if rows.num_rows else None)


def formula_metadata(table: DeltaTable | None, now: datetime) -> dict:
    age = formula_age(table)
    return {
        META_FORMULAS_AGE: dg.MetadataValue.float(round(age.seconds(now), 3)),
        META_FORMULAS_MISSING: dg.MetadataValue.int(age.missing),
    }


def check_formulas_fresh(
    table: DeltaTable | None, name: str, options: FormulasConfig, now: datetime
) -> dg.AssetCheckResult:
    age = formula_age(table)
    seconds, limit = age.seconds(now), options.max_age
    meta: dict[str, float | int | str] = {
        META_FORMULAS_AGE: seconds,
        META_FORMULAS_MISSING: age.missing,
        "live_rows": age.live,
        "threshold_seconds": limit,
        "oldest_at": age.oldest.isoformat() if age.oldest else "",
    }
    if seconds <= limit:
        return dg.AssetCheckResult(
            check_name=FORMULAS_FRESH,
            passed=True,
            metadata=meta,
            description=f"The oldest live formula value is {seconds:.0f} s old "
            f"(limit {limit:g} s); {age.missing} rows await their first read.",
        )
    return dg.AssetCheckResult(
        check_name=FORMULAS_FRESH,
        passed=False,
        metadata=meta,
        description=f"The oldest live {name} formula value was read at {meta['oldest_at']}, {seconds:.0f} s ago "
        f"(limit {limit:g} s, twice the full-pass interval): formula refreshes are not keeping up. "
        f"Check that the sensor formulas_sensor is on and its runs succeed (API budget, credentials), "
        f"or materialize salesforce/{name} with run config {{mode: formulas, formulas_full: true}}.",
    )
