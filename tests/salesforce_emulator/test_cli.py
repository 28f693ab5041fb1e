"""``python -m salesforce_emulator serve | generate`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from salesforce_emulator.cli import main
from salesforce_emulator.testing import header, read_landed_events

REPO = Path(__file__).resolve().parents[2]


def test_generate_without_a_server_writes_the_store_and_events(tmp_path, capsys):
    args = ["--data-dir", str(tmp_path / "org"), "--landing-dir", str(tmp_path / "landing")]
    assert main([*args, "generate", "--accounts", "20", "--changes", "100", "--seed", "4"]) == 0
    stats = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert stats["built_Account"] == 20 and stats["transactions"] >= 90
    events = read_landed_events(tmp_path / "landing")
    assert sum(header(e)["changeType"] == "CREATE" for e in events) >= 20 + 40


def test_serve_then_generate_through_its_rest_api(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["--data-dir", str(tmp_path / "org"), "--landing-dir", str(tmp_path / "landing")]
    server = subprocess.Popen(
        [sys.executable, "-m", "salesforce_emulator", *args, "serve", "--port", "0", "--roll-seconds", "0.2"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "org" / "serve.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        info = json.loads((tmp_path / "org" / "serve.json").read_text())
        assert info["instance_url"].startswith("https://127.0.0.1:")
        generated = subprocess.run(
            [sys.executable, "-m", "salesforce_emulator", *args, "generate", "--accounts", "5", "--changes", "30"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert generated.returncode == 0, generated.stderr
        assert "through the REST API of " + info["instance_url"] in generated.stdout
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0 and not (tmp_path / "org" / "serve.json").exists()
    events = read_landed_events(tmp_path / "landing")
    assert len(events) > 30 and all("rest/59.0" in header(e)["changeOrigin"] for e in events)
