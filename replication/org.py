"""Which org a replica belongs to: one warehouse root holds one org's records.

A sandbox refresh gives the sandbox a new org id (and invalidates its credentials); an operator may point a
warehouse's `SF_*` variables at another org by mistake. Either way the replicas hold the first org's records, and
writing a second org's into them would mix two orgs silently: ids of one org mean nothing in the other, a resync
would mark every record of the first deleted. So every replica run that reads the org (initial load, resync,
reconcile, poll, formula refresh) first asks which org it reads (`SalesforceResource.org_identity`: userinfo's
`organization_id`, one call per run) and compares it with the org the replica's commit state records
(`ReplicaState.org`, carried by every commit from then on). Another org id refuses the run, saying what to do. The
instance URL and API version are recorded with it; a change of either alone (an instance migration, a My Domain
change, a newer API version) is the same org: recorded, not refused. A replica written before the org was recorded
takes the org of its next run that reads one.
"""

from __future__ import annotations

import logging

from deltalake import DeltaTable

from replication.state import OrgIdentity, ReplicaState
from resources.delta import DeltaWarehouse
from resources.salesforce import SalesforceResource

log = logging.getLogger(__name__)


class WrongOrgError(RuntimeError):
    """The run's Salesforce connection reads another org than the one the replica holds records of."""


def same_org(a: str, b: str) -> bool:
    """Two org ids name the same org: equal in their 15-character form (the 18-character one adds a checksum)."""
    return a[:15] == b[:15]


def org_for_run(
    warehouse: DeltaWarehouse, table: DeltaTable | None, salesforce: SalesforceResource, name: str
) -> OrgIdentity:
    """The org this run reads, to record in its commits; WrongOrgError when replica `name` (`table`, None: no table
    yet) holds another org's records."""
    reads = OrgIdentity.from_dict(salesforce.org_identity())
    held = ReplicaState.read(warehouse, table).org if table is not None else None
    if held is not None and not same_org(held.org_id, reads.org_id):
        raise WrongOrgError(
            f"{name}: the replica holds records of org {held.org_id} (read through {held.instance_url}), but this "
            f"run's Salesforce connection reads org {reads.org_id} ({reads.instance_url}); nothing was read or "
            "written. A warehouse root holds one org: point the SF_* variables back at that org, or, for the new org "
            "(a refreshed sandbox has a new org id), give it its own warehouse root (CDC_WAREHOUSE) and let its "
            "initial loads build it, or move this table away so that an initial load rebuilds it from the new org."
        )
    if held is not None and (held.instance_url, held.api_version) != (reads.instance_url, reads.api_version):
        log.info(
            "%s: org %s is now read through %s (API %s), was %s (API %s)",
            name,
            reads.org_id,
            reads.instance_url,
            reads.api_version,
            held.instance_url,
            held.api_version,
        )
    return reads
