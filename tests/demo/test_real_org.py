"""`python -m demo --org`: refuses without the org's variables, and, pointed at an emulator as if it were a real org
(only SF_* variables; the emulator in its own process), starts the subscriber, waits until it is subscribed, then
Dagster with the sensors; Ctrl-C stops it all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo import processes
from demo.main import main
from shared.subscriber_state import read_statuses, state_dir_for


def _without_org(monkeypatch) -> None:
    for var in [v for v in os.environ if v.startswith("SF_")]:
        monkeypatch.delenv(var)


def test_refuses_without_the_org_variables_and_names_them(monkeypatch, tmp_path):
    _without_org(monkeypatch)
    with pytest.raises(SystemExit) as refused:
        main(["--org", "--root", str(tmp_path)])
    message = str(refused.value)
    assert "SF_CLIENT_ID + SF_USERNAME + SF_PRIVATE_KEY_FILE" in message and "SF_CLIENT_SECRET" in message
    assert "Set: none" in message and not list(tmp_path.iterdir())  # nothing started, nothing written

    monkeypatch.setenv("SF_CLIENT_ID", "an-app")  # half a login: still refused, with what is there
    with pytest.raises(SystemExit, match="Set: SF_CLIENT_ID"):
        main(["--org", "--root", str(tmp_path)])


def test_refuses_an_org_url_without_https_before_anything_starts(monkeypatch, tmp_path):
    _without_org(monkeypatch)
    for name, value in {
        "SF_INSTANCE_URL": "http://acme.my.salesforce.com",
        "SF_CLIENT_ID": "an-app",
        "SF_CLIENT_SECRET": "s3cr3t",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=r"SF_INSTANCE_URL .* is not an https URL") as refused:
        main(["--org", "--root", str(tmp_path)])
    assert "s3cr3t" not in str(refused.value) and not list(tmp_path.iterdir())


def _serve_emulator(root: Path) -> tuple[subprocess.Popen, dict]:
    """The emulator in its own process (HTTPS + Pub/Sub API), as a remote org would be; its serve.json."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "salesforce_emulator",
            "--data-dir",
            str(root / "org"),
            "serve",
            "--port",
            "0",
            "--pubsub-port",
            "0",
            "--no-landing",
        ],
        cwd=processes.REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    info = root / "org" / "serve.json"
    deadline = time.monotonic() + 60
    while not info.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the emulator did not start"
        time.sleep(0.2)
    return process, json.loads(info.read_text())


@pytest.mark.slow
def test_against_an_org_from_variables_alone_it_starts_the_stack(tmp_path):
    emulator, org = _serve_emulator(tmp_path)
    config = tmp_path / "replication.yaml"
    config.write_text("options: {initial_load: false}\nobjects: [Account]\n")  # no runs needed to see it start
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SF_", "CDC_", "DAGSTER_"))} | {
        "SF_INSTANCE_URL": org["instance_url"],
        "SF_CLIENT_ID": "emulator-client",
        "SF_CLIENT_SECRET": "emulator-secret",
        "SF_CA_BUNDLE": org["ca_file"],
        "SF_PUBSUB_ENDPOINT": org["pubsub_endpoint"],
        "CDC_CONFIG": str(config),
    }
    port = processes.free_port()
    stack = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "demo",
            "--org",
            "--root",
            str(tmp_path / "run"),
            "--no-spark-connect",
            "--ui-port",
            str(port),
        ],
        cwd=processes.REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        processes.wait_for_code_location(f"http://127.0.0.1:{port}", stack, timeout_seconds=240)
        [status] = read_statuses(state_dir_for(tmp_path / "run" / "landing"))
        assert status.state == "RUNNING" and status.topic == "/data/ChangeEvents"
        assert (tmp_path / "run" / "dagster_home" / "dagster.yaml").exists()
        stack.send_signal(signal.SIGINT)
        assert stack.wait(timeout=120) == 0
        output = stack.stdout.read().decode()
        assert "login flow client_credentials" in output and "subscribed; starting dagster dev" in output
        [status] = read_statuses(state_dir_for(tmp_path / "run" / "landing"))
        assert status.state == "PAUSED"  # the subscriber drained on the way out
    finally:
        for process in (stack, emulator):
            processes.stop(process, grace_seconds=10)
