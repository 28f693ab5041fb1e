"""The history in Dagster: written by the replica's own step, shown as `salesforce_history/<Object>_history`.

The replica step calls `history_step` before it commits anything (creates or backfills the history table) and
`record_history` after its last commit (lands the versions, replication/history/catch_up.py), which also logs a
materialization of `salesforce_history/<Object>_history` (an asset spec downstream of the replica, never run on its
own: `history_specs`) with the history's own metadata. Its check, `history_matches_replica`, sits on the replica asset
(cdc_assets/history/checks.py), so every run that selects the replica checks both.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_assets.names import HISTORY_GROUP, META_HISTORY_THROUGH, META_HISTORY_VERSIONS, history_key, replica_key
from object_schema.describe import ObjectSchema
from replication.config import ReplicationConfig, SObjectConfig
from replication.history.backfill import ensure_history
from replication.history.catch_up import HistoryResult, catch_up
from replication.history.stage import history_name
from resources.delta import DeltaWarehouse


def history_specs(*, replication: ReplicationConfig) -> list[dg.AssetSpec]:
    """One spec per object with `history: true`: its history table, materialized by the replica's step."""
    return [
        dg.AssetSpec(
            history_key(o.name),
            deps=[replica_key(o.name)],
            group_name=HISTORY_GROUP,
            kinds={"delta"},
            description=f"History of Salesforce {o.name} (SCD type 2): one row per version of each record, one version "
            f"per transaction, `_valid_from` / `_valid_to` / `_is_current`. Written by the replica's own "
            f"runs, in the same cycle as the replica (never run on its own); table {history_name(o.name)}.",
        )
        for o in replication.objects
        if o.history
    ]


def history_step(
    sobject: SObjectConfig,
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    *,
    replica: DeltaTable | None,
    run_id: str,
    spark: Callable[[], SparkSession],
) -> HistoryResult | None:
    """For an object with history: the history table made if missing (backfilled over an existing replica)."""
    if not sobject.history:
        return None
    return ensure_history(spark, warehouse, schema, replica=replica, run_id=run_id) or HistoryResult()


def record_history(
    context: dg.AssetExecutionContext,
    started: HistoryResult | None,
    sobject: SObjectConfig,
    warehouse: DeltaWarehouse,
    schema: ObjectSchema,
    run_id: str,
) -> dict:
    """After the replica's last commit of the run: land its versions, log the history's materialization, and the
    counts for the replica's metadata ({} for an object without history)."""
    if started is None:
        return {}
    result = catch_up(warehouse, schema, run_id=run_id)
    versions = started.counts["history_versions"] + result.counts["history_versions"]
    table = result.table or warehouse.table(history_name(sobject.name))
    metadata = {
        META_HISTORY_VERSIONS: dg.MetadataValue.int(versions),
        META_HISTORY_THROUGH: dg.MetadataValue.int(result.through),
    }
    context.log_event(
        dg.AssetMaterialization(
            asset_key=history_key(sobject.name),
            metadata={
                **metadata,
                "delta_version": dg.MetadataValue.int(table.version() if table is not None else -1),
                "table_uri": dg.MetadataValue.path(warehouse.uri(history_name(sobject.name))),
            },
        )
    )
    context.log.info(
        f"{sobject.name}: history gained {versions} versions (through replica version {result.through - 1})"
    )
    return metadata
