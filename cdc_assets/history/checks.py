"""The check `history_matches_replica` on every replica with `history: true`.

It passes when the history's current versions are the replica: for every record the replica holds clean (not dirty),
exactly one current version whose data columns and deleted flag equal the replica row; no current version of a
record the replica lacks; at most one current version per record. A dirty record is left out: the replica row of a
record awaiting reconciliation may hold changes whose state the history must not invent (a gap, an unknown record,
a person account's name parts); its reconcile makes the version. So is a record changed at or after an overflow
while its resync is pending (the replica folded those changes over rows missing what the overflow dropped); the
resync makes its version. A history behind its replica (a run that died
between the two commits: the next run lands the rest) fails it until then.
"""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import pyarrow.compute as pc

from cdc_assets.names import replica_key
from replication.config import SObjectConfig
from replication.history.chain import DELETED, IS_CURRENT
from replication.history.stage import history_name
from replication.state import ReplicaState
from resources.delta import DeltaWarehouse, read_table

HISTORY_MATCHES_REPLICA = "history_matches_replica"
EXAMPLES = 10


def history_differences(warehouse: DeltaWarehouse, name: str, data_columns: list[str]) -> list[str]:
    """Where the history's current versions differ from replica `name` (module docstring); [] when they agree."""
    replica, history = warehouse.table(name), warehouse.table(history_name(name))
    if replica is None:
        return []
    if history is None:
        return [f"{history_name(name)} does not exist"]
    have = {f.name for f in history.schema().fields}
    columns = [c for c in [*data_columns, DELETED] if c in have]
    rows = read_table(replica, columns=[*columns, "_sf_dirty_since", "_sf_commit_ts"])
    pending = ReplicaState.read(warehouse, replica).resync_pending
    since = datetime.fromisoformat(pending.since.replace("Z", "+00:00")) if pending else None
    clean = {
        r["Id"]: {c: r[c] for c in columns}
        for r in rows.to_pylist()
        if r["_sf_dirty_since"] is None
        and not (since and r["_sf_commit_ts"] is not None and r["_sf_commit_ts"] >= since)
    }
    dirty = set(rows["Id"].to_pylist()) - set(clean)
    current = read_table(history, columns=columns, filter=pc.field(IS_CURRENT))
    out, seen = [], set()
    for version in current.to_pylist():
        rid = version["Id"]
        if rid in seen:
            out.append(f"{rid}: more than one current version")
        seen.add(rid)
        if rid in dirty:
            continue
        if rid not in clean:
            out.append(f"{rid}: a current version but no replica row")
        elif clean[rid] != version:
            fields = sorted(c for c in columns if clean[rid][c] != version[c])
            out.append(f"{rid}: current version differs from the replica in {', '.join(fields)}")
    out.extend(f"{rid}: no current version" for rid in sorted(set(clean) - seen))
    return out


def build_history_check(*, sobject: SObjectConfig) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=replica_key(sobject.name),
        name=HISTORY_MATCHES_REPLICA,
        description="The history's current versions equal the replica (every clean record: data "
        "columns and deleted flag), one current version per record.",
    )
    def history_matches_replica(warehouse: DeltaWarehouse) -> dg.AssetCheckResult:
        replica = warehouse.table(sobject.name)
        columns = [f.name for f in replica.schema().fields if not f.name.startswith("_sf_")] if replica else []
        differences = history_differences(warehouse, sobject.name, columns)
        return dg.AssetCheckResult(
            passed=not differences,
            metadata={
                "differences": dg.MetadataValue.int(len(differences)),
                "examples": dg.MetadataValue.json(differences[:EXAMPLES]),
            },
        )

    return history_matches_replica


def build_history_checks(*, objects: list[SObjectConfig]) -> list[dg.AssetChecksDefinition]:
    return [build_history_check(sobject=o) for o in objects if o.history]
