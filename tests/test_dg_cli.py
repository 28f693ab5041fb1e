"""`dg`, Dagster's CLI, works from the repository root: pyproject.toml's [tool.dg] makes the repository a project
whose code location is definitions.py, as `dagster dev -w workspace.yaml` loads it.

The commands run as a person runs them in a new shell inside the venv: the venv's bin first on PATH, none of the
platform's variables set (so the default replication.yaml and the local emulator's connection apply), and a
DAGSTER_HOME of their own holding the repository's dagster.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from settings import REPO

pytestmark = pytest.mark.slow  # each loads the definitions in a fresh process (15-35 s)


def _dg(args: list[str], home: Path) -> subprocess.CompletedProcess:
    home.mkdir(exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")  # telemetry off, as the platform's instance has it
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SF_", "CDC_", "DAGSTER_"))}
    env |= {"DAGSTER_HOME": str(home), "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "")])}
    return subprocess.run([str(bin_dir / "dg"), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_dg_check_defs_passes_from_the_repository_root(tmp_path):
    done = _dg(["check", "defs"], tmp_path / "dagster_home")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All definitions loaded successfully." in done.stdout


def test_dg_list_defs_lists_every_replica_of_replication_yaml(tmp_path):
    done = _dg(["list", "defs", "--json"], tmp_path / "dagster_home")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    keys = {asset["asset_key"] for asset in listed["assets"]}
    assert {"landing_zone", "change_events", "salesforce/Account", "salesforce/Contact"} <= keys
    assert {"landing_zone_sensor", "reconciliation_sensor"} <= {sensor["name"] for sensor in listed["sensors"]}
