"""One warehouse root holds one org (replication/org.py): replica commits record the org their records come from,
and a run whose Salesforce connection reads another org refuses, against two real HTTPS emulator orgs of
different ids, through Dagster's real materialize()."""

from __future__ import annotations

import time

import dagster as dg
from test_sync import catch_up, make_platform, resource

from cdc_assets.assets import replica_key
from replication.state import OrgIdentity, ReplicaState
from resources.delta import DeltaWarehouse
from salesforce_emulator import Emulator
from salesforce_emulator.landing_lines import event
from salesforce_emulator.workload import Workload
from sensors.work import mode_run_config


def recorded_org(platform) -> OrgIdentity | None:
    return ReplicaState.read(DeltaWarehouse(root=str(platform.warehouse)), platform.delta_table("Account")).org


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """The messages of the run's step failure and of the errors that caused it."""
    error, texts = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error, []
    while error is not None:
        texts.append(error.message)
        error = error.cause
    return "\n".join(texts)


def run_mode(platform, mode: str) -> dg.ExecuteInProcessResult:
    request = dg.RunRequest(asset_selection=[replica_key("Account")], run_config=mode_run_config({"Account": mode}))
    return platform.execute(request)


def test_replicas_record_their_org_and_a_run_reading_another_org_refuses(tmp_path):
    with (
        Emulator(tmp_path / "first", landing_dir=tmp_path / "p" / "landing") as first,
        Emulator(tmp_path / "second", org_number=2) as second,
    ):
        assert first.tenant_id != second.tenant_id
        Workload(first, seed=1).build_org(accounts=5)
        Workload(second, seed=2).build_org(accounts=5)
        platform = make_platform(tmp_path, first, objects=["Account"])
        platform.run()  # initial load from the first org
        assert recorded_org(platform) == OrgIdentity(first.tenant_id, first.instance_url, first.api_version)
        account = next(iter(platform.rows("Account")))
        with first.store.transaction() as txn:
            txn.update("Account", account, {"Rating": "Hot"})
        catch_up(platform, first)  # an apply commit carries the org on
        assert platform.rows("Account")[account]["Rating"] == "Hot"
        assert recorded_org(platform) == OrgIdentity(first.tenant_id, first.instance_url, first.api_version)

        # a gap makes the record dirty: the reconcile below has a record to fetch, so it asks the org it reads
        platform.land([event("Account", "GAP_UPDATE", [account], int(time.time() * 1000))])
        platform.run(close_after=0)
        assert platform.rows("Account")[account]["_sf_dirty_since"] is not None

        before, version = platform.rows("Account"), platform.delta_table("Account").version()
        platform.salesforce = resource(second)  # SF_* pointed at another org (or a refreshed sandbox)
        platform.set_options()
        for mode in ("resync", "reconcile"):
            result = run_mode(platform, mode)
            assert not result.success, mode
            message = failure_text(result)
            assert first.tenant_id in message and second.tenant_id in message, message
            assert "one org" in message and "CDC_WAREHOUSE" in message, message
        assert platform.delta_table("Account").version() == version and platform.rows("Account") == before

        platform.salesforce = resource(first)  # back to its own org: runs go on
        platform.set_options()
        assert run_mode(platform, "resync").success
        assert recorded_org(platform) == OrgIdentity(first.tenant_id, first.instance_url, first.api_version)
