"""The run a step of the engine works in: one replica, as one Dagster run found it.

The Dagster side builds it once per replica step (cdc_assets/assets.py; `cdc_assets/actions.py` `ActionRun` adds the
run's op config) and hands it to the step: the resync, the reconcile, the poll, the formula refresh take it whole
instead of its parts one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from deltalake import DeltaTable

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
