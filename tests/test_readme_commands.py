"""The commands the README and the site's pages write work as written, from the repository root, inside the venv.

"Inside the venv" is what `source .venv/bin/activate` does: the venv's bin first on PATH, so a bare `python` is
the venv's. The tests run the commands that way, in a folder laid out as `make run` leaves the repository (a
`.demo/landing` whose `_subscriber` folder holds a RUNNING stream's status, written by the subscriber's own
StatusReporter), with none of the platform's variables set, as in a new shell. Commands that need the running
stack (`subscribe`, `make run` itself) are not run; their modules must at least answer `--help`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from docs_pages import all_text

from cdc_subscriber.status import StatusReporter
from shared.subscriber_state import state_dir_for

REPO = Path(__file__).resolve().parents[1]
TOPIC = "/data/ChangeEvents"
PLATFORM_VARIABLES = ("CDC_LANDING_ZONE", "CDC_SUBSCRIBER_STATE", "CDC_WAREHOUSE", "CDC_CONFIG")


def _venv_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PLATFORM_VARIABLES}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=cwd, env=_venv_env(), capture_output=True, text=True, timeout=180)


@pytest.fixture
def after_make_run(tmp_path: Path) -> Path:
    reporter = StatusReporter(state_dir_for(tmp_path / ".demo" / "landing"), TOPIC, "ChangeEvents")
    reporter.set_state("RUNNING")
    return tmp_path


def readme_commands(module: str) -> list[str]:
    """Every `python -m <module> ...` command line the README and the site's pages write (in code, up to a comment
    or backtick)."""
    found = re.findall(rf"(python -m {re.escape(module)}\b[^`#\n]*)", all_text())
    return sorted({c.strip() for c in found})


def test_subscriber_status_as_the_readme_writes_it_finds_the_demos_subscriber(after_make_run: Path):
    assert "python -m cdc_subscriber status" in readme_commands("cdc_subscriber")
    done = _run("python -m cdc_subscriber status", after_make_run)
    assert done.returncode == 0, done.stderr
    assert f"{TOPIC}: RUNNING" in done.stdout and "NOT_STARTED" not in done.stdout
    assert ".demo/landing" in done.stderr  # it says which landing zone it read


def test_subscriber_status_finds_the_subscriber_of_make_run_org(tmp_path: Path):
    StatusReporter(state_dir_for(tmp_path / ".org" / "landing"), TOPIC, "ChangeEvents").set_state("PAUSED")
    done = _run("python -m cdc_subscriber status", tmp_path)
    assert f"{TOPIC}: PAUSED" in done.stdout and ".org/landing" in done.stderr


def test_subscriber_status_follows_the_variables_when_set(after_make_run: Path, tmp_path: Path):
    done = _run(f"CDC_LANDING_ZONE={tmp_path / 'elsewhere'} python -m cdc_subscriber status", after_make_run)
    assert done.returncode == 0 and done.stdout.startswith("NOT_STARTED")  # never guesses over a variable
    state = state_dir_for(after_make_run / ".demo" / "landing")
    done = _run(f"CDC_SUBSCRIBER_STATE={state} python -m cdc_subscriber --landing-dir nowhere status", after_make_run)
    assert f"{TOPIC}: RUNNING" in done.stdout


def test_dead_letters_as_the_readme_writes_it_reads_the_demos_state(after_make_run: Path):
    assert "python -m cdc_subscriber dead-letters" in readme_commands("cdc_subscriber")
    done = _run("python -m cdc_subscriber dead-letters", after_make_run)
    assert done.returncode == 0 and "0 dead letter(s)" in done.stdout


@pytest.mark.parametrize("module", ["demo", "demo.latency", "cdc_subscriber", "salesforce_emulator"])
def test_readme_modules_answer_help_inside_the_venv(module: str):
    assert readme_commands(module), f"the README or a page of the site names python -m {module}"
    done = _run(f"python -m {module} --help", REPO)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_every_module_the_pages_run_exists():
    """A module renamed or removed leaves no `python -m` of it behind in the README or the site."""
    modules = set(re.findall(r"python -m ([A-Za-z_][\w.]*)", all_text()))
    assert {"cdc_subscriber", "demo", "bench", "resources.spark_connect"} <= modules
    assert [m for m in sorted(modules) if importlib.util.find_spec(m) is None] == []


def test_the_options_reference_command_runs():
    done = _run("python -m replication.config", REPO)
    assert done.returncode == 0 and "| `transaction_close_after` |" in done.stdout


def test_the_readme_says_how_to_enter_the_venv_and_the_entry_point_exists():
    readme = (REPO / "README.md").read_text()
    assert "source .venv/bin/activate" in readme[:2000]  # before the first command beyond make
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["cdc-subscriber"].split(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_the_demo_banner_prints_the_status_command_the_readme_writes():
    from types import SimpleNamespace

    from demo.main import _banner
    from demo.processes import REPO as DEMO_REPO

    emu = SimpleNamespace(
        pubsub_address="127.0.0.1:7443",
        events=object(),
        instance_url="https://127.0.0.1:8443",
        token="t",
        ca_file="ca.pem",
    )
    banner = _banner("http://127.0.0.1:3000", emu, DEMO_REPO / ".demo", Path("dagster.log"), "local")
    assert "status: python -m cdc_subscriber status " in banner and "source .venv/bin/activate" in banner
    assert "GAP_OVERFLOW" in banner  # the injected faults are announced
