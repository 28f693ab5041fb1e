"""Compare replica tables with the emulator's org, record by record and field by field."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, date, datetime

from deltalake import DeltaTable

from object_schema.describe import ObjectSchema
from replication.changefeed.rows import json_value
from resources.delta import read_table
from salesforce_emulator import Emulator


def _norm(value):
    if isinstance(value, datetime):
        value = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
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


def history_differences(emu: Emulator, name: str, versions: list[dict], limit: int = 10) -> list[str]:
    """Where a history table's versions differ from the states the org went through (`Emulator(keep_states=True)`).

    A `cdc` version must equal the record's state after the transaction it names; a sync version (snapshot,
    reconcile, poll) the state the record had at its `_sf_commit_ts` (the SystemModstamp it was read with), or be
    deleted if the org purged the record. Per record: versions numbered 1..n, each closed where the next opens,
    the last one current, cdc versions in the org's commit order.
    """
    schema = ObjectSchema.from_describe(emu.store.describe(name))
    states: dict[str, list[dict]] = {}
    for s in emu.store.record_states(name):
        states.setdefault(s["Id"], []).append(s)
    by_record: dict[str, list[dict]] = {}
    for v in versions:
        by_record.setdefault(v["Id"], []).append(v)
    diffs: list[str] = []
    for rid, chain in by_record.items():
        chain.sort(key=lambda v: v["_version"])
        if [v["_version"] for v in chain] != list(range(1, len(chain) + 1)):
            diffs.append(f"{name} {rid}: versions {[v['_version'] for v in chain]}")
        for a, b in itertools.pairwise(chain):
            if a["_valid_to"] != b["_valid_from"] or a["_is_current"]:
                diffs.append(
                    f"{name} {rid} v{a['_version']}: closes at {a['_valid_to']}, next opens {b['_valid_from']}"
                )
        if not chain[-1]["_is_current"] or chain[-1]["_valid_to"] is not None:
            diffs.append(f"{name} {rid}: the last version is not current")
        known = states.get(rid, [])
        order = [s["transaction_key"] for s in known]
        keys = [v["_transaction_key"] for v in chain if v["_sf_source"] == "cdc" and v["_transaction_key"]]
        if [k for k in order if k in set(keys)] != keys:
            diffs.append(f"{name} {rid}: cdc versions {keys} not in the org's commit order")
        for v in chain:
            if v["_sf_source"] == "cdc":
                found = [s for s in known if s["transaction_key"] == v["_transaction_key"]]
            else:
                found = [
                    s for s in known if s["state"] and _norm(s["state"]["SystemModstamp"]) == _norm(v["_sf_commit_ts"])
                ]
                if not found and known and known[-1]["state"] is None:  # purged: the sync marks it deleted
                    if not v["_sf_deleted"]:
                        diffs.append(f"{name} {rid} v{v['_version']}: purged in the org, not deleted")
                    continue
            if not found or found[-1]["state"] is None:
                diffs.append(f"{name} {rid} v{v['_version']} ({v['_sf_source']}): no such org state")
                continue
            state = found[-1]["state"]
            if bool(v["_sf_deleted"]) != bool(state.get("IsDeleted")):
                diffs.append(f"{name} {rid} v{v['_version']}: deleted {v['_sf_deleted']}, org {state['IsDeleted']}")
            for column in schema.column_names:
                want, got = _norm(state.get(column)), _norm(v.get(column))
                if isinstance(want, float) and isinstance(got, float) and math.isclose(want, got, rel_tol=1e-9):
                    continue
                if want != got:
                    diffs.append(f"{name} {rid} v{v['_version']}.{column}: history {got!r} org {want!r}")
    return diffs[:limit] if limit else diffs


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
            if not (want == got or (isinstance(want, float) and isinstance(got, float) and math.isclose(want, got))):
                diffs.append(f"{name} {record['Id']}.{column}: replica {got!r} org {want!r}")
    return diffs[:limit] if limit else diffs
