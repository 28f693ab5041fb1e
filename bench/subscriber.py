"""The CDC subscriber's throughput: events it lands per second from the emulator's Pub/Sub API.

An org is generated once into ``bench/out/subscriber`` (its event bus in ``events.sqlite``), then served over gRPC
from this process while ``python -m cdc_subscriber subscribe`` (its own process, as in production) lands every
event from EARLIEST into a fresh landing zone. The wall time runs from the subscriber's start until its durable
position reaches the newest event (process start included; ``steady_per_s`` leaves it out: subscribed -> done).
The floor is a client that only receives the same events over the same stream (same flow control), decoding and
landing nothing: what is left above it is Avro decoding, CometD reconstruction and file landing.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.common import figures
from bench.workloads import OUT
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload

REPO = Path(__file__).resolve().parent.parent


def _org(accounts: int, changes: int) -> Path:
    root = OUT / f"subscriber-{accounts}-{changes}"
    if not (root / "done.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        with Emulator(root / "org", pubsub=True) as emu:
            workload = Workload(emu, seed=42)
            workload.build_org(accounts=accounts)
            workload.run(changes=changes)
        (root / "done.json").write_text("{}")
    return root


def _position(state: Path) -> tuple[int, float | None]:
    path = state / "position-data.ChangeEvents.json"
    if not path.exists():
        return 0, None
    return json.loads(path.read_text())["replay_int"], path.stat().st_mtime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _subscribe(emu: Emulator, work: Path) -> tuple[float, float, float]:
    """(wall seconds, seconds from the subscription (state RUNNING) to done, subscriber peak RSS MB)."""
    shutil.rmtree(work, ignore_errors=True)
    landing, state = work / "landing", work / "state"
    env = os.environ | {"SF_INSTANCE_URL": emu.instance_url, "SF_ACCESS_TOKEN": emu.token, "SF_CA_BUNDLE": emu.ca_file}
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cdc_subscriber",
            "--landing-dir",
            str(landing),
            "--state-dir",
            str(state),
            "subscribe",
            "--endpoint",
            emu.pubsub_address,
            "--initial-replay",
            "EARLIEST",
            "--config",
            "/nonexistent",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    running = None
    rss = 0.0
    while True:
        replay, _ = _position(state)
        if running is None and '"RUNNING"' in _read(state / "status-data.ChangeEvents.json"):
            running = time.monotonic()
        rss = max(rss, _rss_mb(proc.pid))
        if replay >= emu.events.tip:
            break
        if proc.poll() is not None:
            raise RuntimeError(f"the subscriber exited with code {proc.returncode}")
        time.sleep(0.05)
    wall = time.monotonic() - started
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    return wall, wall - ((running or started) - started), rss


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def receive_only(endpoint: str, ca_file: str, token: str, tip: int) -> None:
    """The floor: the same stream, nothing decoded or landed (run in its own process)."""
    import grpc

    from cdc_subscriber.proto import pb, replay_to_int, services

    with grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(Path(ca_file).read_bytes())) as channel:
        stub = services.PubSubStub(channel)
        requests: queue.Queue = queue.Queue()
        requests.put(
            pb.FetchRequest(
                topic_name="/data/ChangeEvents", num_requested=100, replay_preset=pb.ReplayPreset.Value("EARLIEST")
            )
        )
        outstanding = 100
        call = stub.Subscribe(iter(requests.get, None), metadata=(("accesstoken", token),))
        for response in call:
            outstanding -= len(response.events)
            if response.events and replay_to_int(response.events[-1].replay_id) >= tip:
                break
            if outstanding <= 50:
                requests.put(pb.FetchRequest(num_requested=100 - outstanding))
                outstanding = 100
        call.cancel()
        requests.put(None)


def run(accounts: int, changes: int) -> list[dict]:
    root = _org(accounts, changes)
    with Emulator(root / "org", pubsub=True) as emu:
        events = len(emu.events.read(emu.events.earliest(), emu.events.tip, None, 10_000_000))
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "bench.subscriber", emu.pubsub_address, emu.ca_file, emu.token, str(emu.events.tip)],
            cwd=REPO,
            check=True,
        )
        floor = time.monotonic() - started
        wall, steady, rss = _subscribe(emu, root / "run")
    return [
        figures(
            workload="subscriber",
            unit="events",
            count=events,
            wall_s=wall,
            floor_s=floor,
            steady_per_s=events / steady if steady else None,
            subscriber_peak_rss_mb=round(rss, 1),
        )
    ]


if __name__ == "__main__":
    receive_only(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
