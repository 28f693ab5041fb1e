"""Every read example of the site's "Reading the replicas" runs, in a fresh process, and exits cleanly.

The examples are taken from the page itself (every ```python block of the section, docs/guides/reading-replicas.md
today; tests/docs_pages.py finds it wherever it moves), so the page cannot drift from what is tested. They run against a replica written the way the platform writes one (delta-rs, partitioned by
`_sf_bucket`, Change Data Feed on, a merge that updates one record and soft-deletes another) and its changefeed
exported by the real exporter, in `.demo/` as `make run` leaves it. Each runs twice in its own interpreter: exit
134 (`terminate called without an active exception`) came at interpreter exit about half the time through
deltalake's pyarrow dataset, so one clean exit would prove little.

A second test keeps that path out of the project: no module reads through `to_pyarrow_table` /
`to_pyarrow_dataset` (resources/delta.py's `arrow_dataset` is the one read path).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from docs_pages import code_blocks

from cdc_assets.changefeed.export import export_changefeed
from replication.changefeed.config import ChangefeedConfig
from resources.delta import DeltaWarehouse, table_configuration

REPO = Path(__file__).resolve().parents[1]
SECTION = "Reading the replicas"
LIVE, RENAMED, DELETED = "001000000000001AAA", "001000000000002AAA", "001000000000003AAA"
RUNS_EACH = 2


def readme_examples() -> list[str]:
    return code_blocks(SECTION, "python")


def _write_replica(warehouse: Path) -> None:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    rows = pa.table(
        {
            "Id": [LIVE, RENAMED, DELETED],
            "Name": ["Acme", "Globex", "Initech"],
            "OwnerId": ["005A", "005B", None],
            "_sf_deleted": [False, False, False],
            "_sf_deleted_at": pa.array([None] * 3, pa.timestamp("us", "UTC")),
            "_sf_commit_ts": pa.array([ts] * 3, pa.timestamp("us", "UTC")),
            "_sf_replay_id": pa.array([7, None, 9], pa.int64()),
            "_sf_commit_number": pa.array([1, None, 3], pa.int64()),
            "_sf_source": ["cdc", "snapshot", "cdc"],
            "_sf_bucket": ["0010000000000"] * 3,
        }
    )
    uri = str(warehouse / "Account")
    write_deltalake(uri, rows, partition_by=["_sf_bucket"], configuration=table_configuration("Account"))
    change = pa.table({"Id": [RENAMED, DELETED], "Name": ["Globex Corp", "Initech"], "_sf_deleted": [False, True]})
    (
        DeltaTable(uri)
        .merge(change, predicate="t.Id = s.Id", source_alias="s", target_alias="t")
        .when_matched_update({"Name": "s.Name", "_sf_deleted": "s._sf_deleted"})
        .execute()
    )


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reader")
    _write_replica(root / ".demo" / "warehouse")
    feed = ChangefeedConfig(uri=str(root / ".demo" / "changefeed"), initial_scan=True)
    export_changefeed(DeltaWarehouse(root=str(root / ".demo" / "warehouse")), "Account", feed)
    return root


def test_the_readme_has_the_examples():
    assert len(readme_examples()) >= 5  # pandas/Arrow, DataFusion, polars, DuckDB, changefeed


@pytest.mark.parametrize("index", range(len(readme_examples())))
def test_readme_read_example_runs_and_exits_cleanly(demo_dir: Path, index: int):
    code = readme_examples()[index]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    for _ in range(RUNS_EACH):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=demo_dir, env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"example {index} exited {done.returncode}:\n{code}\n{done.stderr[-3000:]}"
        assert "terminate called" not in done.stderr
    out = done.stdout
    assert DELETED not in out  # the current rows never show the soft-deleted record
    if "replay(" in code:
        assert out.startswith("2 live rows")
    elif "dtypes" in code:
        assert out.split() == ["Int64", "2"]  # a nullable integer stays an integer
    elif "QueryBuilder" in code:
        assert out.split() == ["2", LIVE]
    elif "polars" in code:
        assert LIVE in out and RENAMED in out and "Globex Corp" in out and "null" in out
    elif "duckdb" in code:
        assert out.strip() == "[(2, 2)]"


def test_no_module_reads_through_deltalakes_pyarrow_dataset():
    offenders = []
    for path in REPO.rglob("*.py"):
        if {".venv", ".demo", "build"} & set(path.relative_to(REPO).parts) or path == Path(__file__):
            continue
        if re.search(r"\.to_pyarrow_(table|dataset)\(", path.read_text()):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == [], f"read through resources.delta.read_table / arrow_dataset instead: {offenders}"
