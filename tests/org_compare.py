"""Compare replica tables with the emulator's org, record by record and field by field."""

from __future__ import annotations

import math
from datetime import date, datetime, timezone

from resources.delta import read_table
from deltalake import DeltaTable

from cdc_assets.changefeed.rows import json_value
from salesforce_emulator import Emulator
from spark_ops.schema import ObjectSchema


def _norm(value):
    if isinstance(value, datetime):
        value = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, str) and value.endswith("+0000"):
        return value[:-5] + "Z"
    return value


def differences(emu: Emulator, name: str, rows: dict[str, dict], limit: int = 10) -> list[str]:
    """Where the replica differs from the org: every org record and replicated field, and deleted flags.

    Records the org no longer has at all (hard-deleted) must be soft-deleted in the replica.
    """
    schema = ObjectSchema.from_describe(emu.store.describe(name))
    diffs: list[str] = []
    org = {r["Id"]: r for r in emu.store.snapshot(name)}
    for rid, record in org.items():
        row = rows.get(rid)
        if row is None:
            diffs.append(f"{name} {rid}: missing from replica")
            continue
        if bool(row["_sf_deleted"]) != bool(record.get("IsDeleted")):
            diffs.append(f"{name} {rid}: _sf_deleted={row['_sf_deleted']} but IsDeleted={record['IsDeleted']}")
        if row["_sf_dirty_since"] is not None:
            diffs.append(f"{name} {rid}: still dirty")
        for column in schema.column_names:
            want, got = _norm(record.get(column)), _norm(row.get(column))
            if isinstance(want, float) and isinstance(got, float) and math.isclose(want, got, rel_tol=1e-9):
                continue
            if want != got:
                diffs.append(f"{name} {rid}.{column}: replica {got!r} org {want!r}")
    for rid, row in rows.items():
        if rid not in org and not row["_sf_deleted"]:
            diffs.append(f"{name} {rid}: gone from the org but not deleted in the replica")
    return diffs[:limit] if limit else diffs


def live_rows(table: DeltaTable) -> dict[str, dict]:
    """A replica's live rows, field by field (data columns, values as a changefeed renders them): what replaying
    its feed must give."""
    out = {}
    for row in read_table(table).to_pylist():
        if not row["_sf_deleted"]:
            out[row["Id"]] = {k: json_value(v) for k, v in row.items() if k != "Id" and not k.startswith("_sf_")}
    return out


def formula_differences(emu: Emulator, name: str, rows: dict[str, dict], limit: int = 10) -> list[str]:
    """Where the replica's formula columns differ from the org's formula values, over the org's live records (a
    deleted row keeps the values it had). Every live record must have been read (`_sf_formulas_at`)."""
    schema = ObjectSchema.from_describe(emu.store.describe(name)).with_formulas()
    diffs: list[str] = []
    for record in emu.store.snapshot(name):
        row = rows.get(record["Id"])
        if record.get("IsDeleted") or row is None:
            continue
        if row.get("_sf_formulas_at") is None:
            diffs.append(f"{name} {record['Id']}: formula values never read")
        for column in schema.formula_names:
            want, got = _norm(record.get(column)), _norm(row.get(column))
            if not (want == got or isinstance(want, float) and isinstance(got, float) and math.isclose(want, got)):
                diffs.append(f"{name} {record['Id']}.{column}: replica {got!r} org {want!r}")
    return diffs[:limit] if limit else diffs
