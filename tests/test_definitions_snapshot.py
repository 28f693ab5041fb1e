"""Every asset, asset check, sensor, job and schedule the repository's own replication.yaml makes, against a committed
snapshot (tests/data/definitions.txt), so a change to the Dagster graph shows in review as a diff of that file.

A deliberate change is recorded by writing the snapshot again and committing it with the change:

    UPDATE_SNAPSHOT=1 pytest tests/test_definitions_snapshot.py
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import dagster as dg
import pytest
from settings import REPO

from definitions import build_defs

SNAPSHOT = REPO / "tests" / "data" / "definitions.txt"
REGENERATE = "UPDATE_SNAPSHOT=1 pytest tests/test_definitions_snapshot.py"
HEADER = (
    "# Every definition build_defs makes from replication.yaml, one per line, sorted: <kind> <name>.\n"
    f"# Written by tests/test_definitions_snapshot.py; after a deliberate change: {REGENERATE}\n"
)


def definition_lines(defs: dg.Definitions) -> list[str]:
    """`asset <key>`, `check <asset key>:<check>`, `sensor <name>`, `job <name>`, `schedule <name>`, sorted; Dagster's
    implicit asset job (`__ASSET_JOB`) is its own, not the platform's."""
    repository = defs.get_repository_def()
    lines = [f"asset {key.to_user_string()}" for key in repository.asset_graph.get_all_asset_keys()]
    lines += [f"check {key.asset_key.to_user_string()}:{key.name}" for key in repository.asset_graph.asset_check_keys]
    lines += [f"sensor {sensor.name}" for sensor in repository.sensor_defs]
    lines += [f"job {name}" for name in repository.job_names if not name.startswith("__")]
    lines += [f"schedule {schedule.name}" for schedule in repository.schedule_defs]
    return sorted(lines)


def built_from(config: Path, tmp: Path) -> list[str]:
    """The definition lines of `config`, with a landing zone and warehouse of the test's own."""
    return definition_lines(
        build_defs(config_path=config, landing_path=str(tmp / "landing"), warehouse_root=str(tmp / "warehouse"))
    )


def snapshot_difference(lines: list[str], snapshot: Path) -> str:
    """A unified diff from the committed snapshot to `lines` ("" when they agree), and how to record the change."""
    if not snapshot.exists():
        return f"No snapshot at {snapshot}: write it with {REGENERATE}"
    committed = [line for line in snapshot.read_text().splitlines() if not line.startswith("#")]
    label = str(snapshot.relative_to(REPO) if snapshot.is_relative_to(REPO) else snapshot)
    diff = "\n".join(difflib.unified_diff(committed, lines, label, "build_defs", lineterm=""))
    if not diff:
        return ""
    return (
        f"The Dagster definitions differ from the snapshot ('-' committed, '+' built now):\n{diff}\n\n"
        f"If the change is meant, write the snapshot again and commit it with the change: {REGENERATE}"
    )


@pytest.fixture(scope="module")
def repository_lines(tmp_path_factory) -> list[str]:
    return built_from(REPO / "replication.yaml", tmp_path_factory.mktemp("definitions"))


def test_the_definitions_match_the_committed_snapshot(repository_lines):
    if os.environ.get("UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(HEADER + "\n".join(repository_lines) + "\n")
    assert len(repository_lines) == len(set(repository_lines)), "a definition is listed twice"
    assert not (difference := snapshot_difference(repository_lines, SNAPSHOT)), difference


def test_a_changed_asset_key_fails_with_the_diff_and_how_to_regenerate(repository_lines, tmp_path):
    """An object dropped from replication.yaml: its replica asset (and everything made for it) shows as removed."""
    config = tmp_path / "replication.yaml"
    text = (REPO / "replication.yaml").read_text()
    assert "  - name: Lead\n" in text
    config.write_text(text.replace("  - name: Lead\n", ""))
    lines = built_from(config, tmp_path)
    snapshot = tmp_path / "definitions.txt"
    snapshot.write_text(HEADER + "\n".join(repository_lines) + "\n")
    difference = snapshot_difference(lines, snapshot)
    assert "\n-asset salesforce/Lead\n" in difference
    assert "\n-check salesforce/Lead:" in difference
    assert not any(line.startswith("+") and not line.startswith("+++") for line in difference.splitlines())
    assert difference.endswith(REGENERATE)
