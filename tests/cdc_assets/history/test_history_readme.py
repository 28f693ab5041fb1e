"""The site's history queries ("History tables": a record as of a time, how a field changed) run, in a fresh
process each, against a history the platform wrote from the golden sample, and print what that history holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import code_blocks
from harness import Platform, load_lines
from settings import REPO, TEST_SPARK_CONF

SECTION = "History tables"


def history_examples() -> list[str]:
    return code_blocks(SECTION, "python")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, spark, sample_dir) -> Path:
    root = tmp_path_factory.mktemp("history-reader")
    platform = Platform(root / "p", sample_dir / "describe", ["Account"], TEST_SPARK_CONF, history=True)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    assert platform.run().success
    (root / ".demo").mkdir(exist_ok=True)  # where the examples read, as `make run` leaves it
    (root / ".demo" / "warehouse").symlink_to(root / "p" / "warehouse")
    return root


def run(code: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"exited {done.returncode}:\n{code}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_record_as_of_a_time_is_the_version_valid_then(demo_dir):
    out = run(history_examples()[0], demo_dir)
    # 08:28 falls between the record's Industry update (08:27:40) and its BillingCity update (08:29:40).
    assert "'Industry': 'Energy'" in out and "'BillingCity': 'Springfield'" in out and "'_version': 2" in out


def test_how_a_field_changed_lists_each_value_once(demo_dir):
    lines = run(history_examples()[1], demo_dir).strip().splitlines()
    assert len(lines) == 2 and "None -> Manufacturing" in lines[0] and "Manufacturing -> Energy cdc" in lines[1]
