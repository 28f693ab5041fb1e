"""resources.delta: log checkpoints keep table loads cheap without changing what a table says."""

from __future__ import annotations

import pyarrow as pa

from resources.delta import CHECKPOINT_EVERY, DeltaWarehouse


def test_a_checkpoint_every_few_commits_keeps_app_transactions_and_commit_state(tmp_path):
    warehouse = DeltaWarehouse(root=str(tmp_path))
    rows = pa.table({"Id": pa.array(["001000000000001AAA"]), "n": pa.array([0], pa.int64())})
    warehouse.append("T", rows, partition_by=None, key="k", state={"step": 0}, txns={"app": 0})
    for step in range(1, CHECKPOINT_EVERY + 2):
        warehouse.upsert("T", rows.set_column(1, "n", pa.array([step], pa.int64())), key_column="Id",
                         partition_column="Id", partition_values=[], key="k", state={"step": step},
                         txns={"app": step})
    log = tmp_path / "T" / "_delta_log"
    assert (log / f"{CHECKPOINT_EVERY:020d}.checkpoint.parquet").exists()
    assert not list(log.glob(f"{CHECKPOINT_EVERY + 1:020d}.checkpoint*"))
    table = warehouse.table("T")
    assert table.version() == CHECKPOINT_EVERY + 1
    assert table.transaction_version("app") == CHECKPOINT_EVERY + 1
    assert DeltaWarehouse.commit_state(table, "k") == {"step": CHECKPOINT_EVERY + 1}
    assert table.to_pyarrow_table().to_pylist() == [{"Id": "001000000000001AAA", "n": CHECKPOINT_EVERY + 1}]
