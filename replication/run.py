"""The run a step of the engine works in: one replica, as one Dagster run found it.

The Dagster side builds it once per replica step (cdc_assets/assets.py; `cdc_assets/actions.py` `ActionRun` adds the
run's op config) and hands it to the step: the resync, the reconcile, the poll, the formula refresh, the settling of
field access take `ReplicaRun` whole instead of its parts one by one; the apply step and what it calls
(replication/apply.py, describe_drift.py) take `ApplyRun`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from object_schema.describe import ObjectSchema
from replication.config import ReplicationOptions, SObjectConfig
from replication.org import org_for_run
from replication.state import OrgIdentity
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource


@dataclass(frozen=True)
class ReplicaRun:
    """What a step works with: the object and replication.yaml's options, the warehouse and the org, the replica's
    snapshot as the run found it (None: no table yet) and its schema with the describe() it came from, the run's id
    and time (stamped on what it writes)."""

    sobject: SObjectConfig
    options: ReplicationOptions
    warehouse: DeltaWarehouse
    salesforce: SalesforceResource
    schema: ObjectSchema
    describe: dict | None
    table: DeltaTable | None
    run_id: str
    now: datetime

    def org(self) -> OrgIdentity:
        """The org this run reads (recorded in its commits); refuses a replica that holds another org's records."""
        return org_for_run(self.warehouse, self.table, self.salesforce, self.sobject.name)


@dataclass(frozen=True)
class ApplyRun:
    """One run's apply of one replica: the Spark session and warehouse it works in, the replica's schema, the run
    (its id and time, stamped on what it writes), how to ask describe() again when events set fields the schema does
    not know (`refresh`), and whether the replica keeps a history: then the state of each record after each
    transaction applied is derived from the same changes and current rows and staged for the history table, named
    in the commit (replication/history/)."""

    spark: SparkSession
    warehouse: DeltaWarehouse
    schema: ObjectSchema
    run_id: str
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    refresh: Callable[[], ObjectSchema] | None = None
    history: bool = False
