"""Fixtures for the subscriber tests: an emulator serving the Pub/Sub API, and subscribers running in threads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from subscriber_harness import RunningSubscriber, Subscriber, landed, resource, subscriber_config

from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a file created without an explicit mode is readable by every user (0644);
    ask for it before ``org`` so the emulator's writer runs under it too."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def org(tmp_path: Path) -> Iterator[Emulator]:
    """An org that writes its own landing files (the reference) and serves the same events over gRPC."""
    with Emulator(
        tmp_path / "org", landing_dir=tmp_path / "reference", pubsub=True, keepalive_seconds=0.3, roll_seconds=3600
    ) as emu:
        yield emu


@pytest.fixture
def start_subscriber(tmp_path: Path):
    running: list[RunningSubscriber] = []

    def start(
        emu: Emulator, root: Path | None = None, salesforce: SalesforceResource | None = None, **overrides: Any
    ) -> RunningSubscriber:
        sub = RunningSubscriber(
            Subscriber(subscriber_config(emu, root or tmp_path / "sub", **overrides), salesforce or resource(emu))
        )
        running.append(sub)
        return sub

    yield start
    for sub in running:
        sub.stop()


@pytest.fixture(name="landed")
def landed_fixture():
    return landed
