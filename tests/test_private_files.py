"""Whatever the umask of the shell that starts it, a code location and the runs it starts write the org's data
private to their user: Delta tables (`_quarantine` keeps raw landed lines), the run's event log and its captured
output, and the instance's folder. The run starts as a person starts one by hand, `dagster asset materialize` in a
new process under the usual umask 022, reading the sample stream (samples/basic) and one line that is not JSON."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from settings import REPO, SAMPLE

pytestmark = pytest.mark.slow  # a fresh process loads the definitions and starts its own Spark


def _open_to_others(paths: list[Path]) -> list[str]:
    return [f"{oct(p.lstat().st_mode & 0o777)} {p}" for p in paths if p.lstat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)]


def test_a_run_started_under_umask_022_writes_private_files(tmp_path):
    home, landing, warehouse = tmp_path / "dagster_home", tmp_path / "landing", tmp_path / "warehouse"
    home.mkdir(mode=0o755)  # as `mkdir` makes it under umask 022
    landing.mkdir(mode=0o700)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    (landing / "00001.jsonl").write_text((SAMPLE / "events.jsonl").read_text() + "not json\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SF_", "CDC_", "DAGSTER_"))}
    env |= {
        "DAGSTER_HOME": str(home),
        "CDC_CONFIG": str(REPO / "samples" / "basic.replication.yaml"),
        "CDC_LANDING_ZONE": str(landing),
        "CDC_WAREHOUSE": str(warehouse),
    }
    dagster = str(Path(sys.executable).parent / "dagster")
    done = subprocess.run(
        [dagster, "asset", "materialize", "-m", "definitions", "--select", "change_events"],
        cwd=REPO,
        env=env,
        umask=0o022,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    assert (warehouse / "_quarantine" / "_delta_log").is_dir()  # the line that is not JSON, kept raw
    assert _open_to_others([warehouse, *warehouse.rglob("*")]) == []
    # The run's event log (history/runs/<run id>.db) and captured output (storage/): written after the load.
    run_files = [p for p in (home / "history" / "runs").iterdir() if p.name != "index.db"]
    run_files += list((home / "storage").rglob("*"))
    assert len(run_files) > 1 and _open_to_others(run_files) == []
    # The run and schedule databases the CLI opened before it loaded the definitions follow its umask (0644), as
    # the webserver's and the daemon's do: the instance's folder, closed at the load, keeps them from other users.
    assert home.stat().st_mode & 0o777 == 0o700
