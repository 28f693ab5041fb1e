"""Pin one run's cut (`replication/closure.py`): decided by its first replica step, read by all the others.

The decision is stored as the hidden run tag `TAG_CUT` (JSON, with the run id, so tags a re-executed run inherits from its
parent are not taken for its own decision) through `instance.add_run_tags`. The executor is in-process (one step
at a time, `definitions.py`), so the first replica step writes it before any other replica step reads it; the run's
log says which transaction it held back and why (the tag is hidden from the UI: cdc_assets/names.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import dagster as dg

from cdc_assets.names import REPLICA_PREFIX, TAG_CUT
from replication.closure import Cut, decide
from replication.state import IngestState
from resources.delta import CHANGE_EVENTS, DeltaWarehouse


def replicas_in_run(context: dg.AssetExecutionContext) -> set[str]:
    """Names of the replicas this run executes (a sensor run's asset selection, else the job's, less the steps
    a re-execution skips)."""
    keys = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys
    steps = context.run.step_keys_to_execute
    return {
        k.path[-1]
        for k in keys
        if len(k.path) == 2 and k.path[0] == REPLICA_PREFIX and (steps is None or k.to_python_identifier() in steps)
    }


def pinned_cut(
    context: dg.AssetExecutionContext, warehouse: DeltaWarehouse, *, close_after: float, replicated: set[str]
) -> Cut:
    """This run's cut: the one an earlier step of the run pinned, else decided now and pinned."""
    instance, run_id = context.instance, context.run.run_id
    run = instance.get_run_by_id(run_id)
    if raw := (run.tags.get(TAG_CUT) if run else None):
        pinned = json.loads(raw)
        if pinned.pop("run", None) == run_id:
            return Cut(**pinned)
    ce_state = IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS))
    cut = decide(ce_state, close_after, datetime.now(UTC), in_run=replicas_in_run(context), replicated=replicated)
    instance.add_run_tags(run_id, {TAG_CUT: json.dumps({"run": run_id, **cut.as_dict()})})
    held = f"holds {cut.open_key} ({cut.reason})" if cut.open_key else "holds no transaction"
    context.log.info(f"This run's replicas apply change_events through ingest {cut.through} and {held}")
    return cut
