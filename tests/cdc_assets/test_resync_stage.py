"""A resync's stage once swapped in (replication/snapshot.py): the swap commits an app transaction naming its stage,
so a resync killed between the swap and the stage's cleanup is finished by the next resync run without a second
snapshot, and a stage left behind that way never stands in for a later resync's snapshot, whatever the replica
went through in between."""

from __future__ import annotations

import dagster as dg
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import replica_key
from replication import snapshot
from replication.snapshot import STAGE_DIR
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload
from sensors.work import mode_run_config

NAME = "Contact"


def resync(platform: Platform) -> dg.ExecuteInProcessResult:
    return platform.execute(
        dg.RunRequest(asset_selection=[replica_key(NAME)], run_config=mode_run_config({NAME: "resync"}))
    )


def test_a_stage_left_after_its_swap_is_finished_once_and_never_replayed_by_a_later_resync(
    tmp_path, spark, monkeypatch
):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as org:
        workload = Workload(org, seed=5, large_transaction=(30, 40), person_accounts=False)
        workload.build_org(accounts=10)
        platform = Platform(
            tmp_path / "p",
            None,
            [NAME],
            TEST_SPARK_CONF,
            initial_load=True,
            close_after=0,
            salesforce=SalesforceResource(
                instance_url=org.instance_url, access_token=org.token, ca_bundle=str(org.ca_file)
            ),
        )
        platform.run()
        stage_log = platform.warehouse / NAME / STAGE_DIR / "_delta_log"

        # 1. Killed between its swap and the cleanup; the next resync run finishes it without a second snapshot.
        monkeypatch.setenv("CDC_FAULT_POINT", "resync.after_commit")
        assert not resync(platform).success
        monkeypatch.delenv("CDC_FAULT_POINT")
        assert stage_log.exists()
        org.reset_request_counts()
        assert resync(platform).success
        assert "bulk_query_job" not in org.request_counts() and not stage_log.exists()
        assert differences(org, NAME, platform.rows(NAME)) == []

        # 2. Killed there again, and this time no resync follows: the replica moves on through its events.
        monkeypatch.setenv("CDC_FAULT_POINT", "resync.after_commit")
        assert not resync(platform).success
        monkeypatch.delenv("CDC_FAULT_POINT")
        workload.run(changes=60)
        org.flush_cdc()
        platform.run()
        assert stage_log.exists()

        # 3. A transaction too large for CDC: only a snapshot taken now brings it. The old stage must not stand in.
        org.set_faults(FaultConfig(overflow_threshold=10, seed=2))
        workload.large(NAME)
        org.set_faults(FaultConfig())
        org.flush_cdc()
        platform.run()
        assert platform.materialization_of(NAME)["resync_pending"]
        org.reset_request_counts()
        platform.run_sensor()
        assert org.request_counts()["bulk_query_job"] == 1  # a snapshot of its own
        assert differences(org, NAME, platform.rows(NAME)) == [] and not stage_log.exists()


def test_records_the_org_purged_are_found_bucket_group_by_bucket_group(tmp_path, spark, monkeypatch):
    """The resync compares the replica's Ids with its snapshot's a few buckets at a time (memory: one group's Ids):
    with a record per bucket and groups of four records, every purged record is still found, whichever group."""
    monkeypatch.setattr(snapshot, "MISSING_CHUNK_RECORDS", 4, raising=False)
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as org:
        Workload(org, seed=5, person_accounts=False).build_org(accounts=12, contacts_per_account=2)
        platform = Platform(
            tmp_path / "p",
            None,
            [NAME],
            TEST_SPARK_CONF,
            initial_load=True,
            close_after=0,
            bucket_chars=15,
            salesforce=SalesforceResource(
                instance_url=org.instance_url, access_token=org.token, ca_bundle=str(org.ca_file)
            ),
        )
        platform.run()
        ids = org.store.ids(NAME)
        purged = [ids[0], ids[len(ids) // 2], ids[-1]]  # first, middle and last groups
        with org.store.transaction() as txn:
            txn.delete(NAME, purged)
        with org.store.transaction() as txn:
            txn.purge(NAME, purged)
        assert resync(platform).success
        assert platform.materialization_of(NAME)["missing_marked_deleted"] == 3
        rows = platform.rows(NAME)
        assert {i for i, r in rows.items() if r["_sf_deleted"]} >= set(purged)
        assert differences(org, NAME, rows) == []
