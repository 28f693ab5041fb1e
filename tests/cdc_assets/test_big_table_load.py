"""Initial load of a wide object (64 columns, the emulator's generated `Wide_Thing__c`) staged in bounded batches:
a run killed after its first batch is continued by the next run from the Bulk position it committed, with the
same Bulk job, and the replica equals the org's records."""

from __future__ import annotations

import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from replication.snapshot import STAGE_DIR
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator, ids

RECORDS = 30_001


def test_a_killed_initial_load_continues_from_its_last_staged_batch(tmp_path, spark, monkeypatch):
    with Emulator(tmp_path / "org") as emu:
        name = emu.add_bulk_object(RECORDS, columns=64)
        emu.api.result_page_records = 4_000
        salesforce = SalesforceResource(
            instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file)
        )
        platform = Platform(
            tmp_path / "p",
            None,
            [name],
            TEST_SPARK_CONF,
            salesforce=salesforce,
            initial_load=True,
            resync_batch_records=10_000,
            bulk_parallel_pages=2,
            bulk_page_size=4_000,
            retry_backoff_seconds=0,
        )
        [load] = platform.sensor_requests()

        monkeypatch.setenv("CDC_FAULT_POINT", "resync.after_stage_batch")  # dies once its first batch is staged
        assert not platform.execute(load).success
        monkeypatch.delenv("CDC_FAULT_POINT")
        assert platform.table_version(name) is None  # nothing of the replica is visible yet
        staged = platform.table(f"{name}/{STAGE_DIR}")
        assert 10_000 <= len(staged) < RECORDS

        emu.reset_request_counts()
        [again] = platform.sensor_requests()
        assert platform.execute(again).success
        counts = emu.request_counts()
        assert "bulk_query_job" not in counts  # the same job, continued from its locator
        assert counts["bulk_results"] == pytest.approx((RECORDS - len(staged)) / 4_000, abs=1)  # the rest only

        rows = platform.table(name)
        assert len(rows) == RECORDS and len({r["Id"] for r in rows}) == RECORDS
        assert min(r["Id"] for r in rows) == ids.make_id("aZz", 1)
        assert sum(r["_sf_deleted"] for r in rows) == RECORDS // 1000  # IsDeleted in the org
        assert len([c for c in rows[0] if not c.startswith("_sf_")]) == 62  # 64 fields less IsDeleted, SystemModstamp
        assert not (platform.warehouse / name / STAGE_DIR / "_delta_log").exists()  # the stage is swapped in
        metadata = platform.materialization_of(name)
        assert metadata["snapshot_rows"] == RECORDS and metadata["dagster/row_count"] == RECORDS
