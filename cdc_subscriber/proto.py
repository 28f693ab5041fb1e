"""The Pub/Sub API messages and stubs, generated from ``pubsub_api.proto`` when this module is imported.

``grpc.protos_and_services`` (grpcio-tools) compiles the ``.proto`` in memory, so no generated code is kept in the
repository or on disk: a fresh clone works as soon as ``pyproject.toml``'s dependencies are installed, and the
stubs always match the ``.proto`` next to this file. ``pb`` holds the messages (``pb.FetchRequest``), ``services``
the client stub (``services.PubSubStub``) and the server helpers (``services.PubSubServicer``,
``services.add_PubSubServicer_to_server``), shared by the subscriber and the emulator's server.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import grpc

_HERE = str(Path(__file__).resolve().parent)
_LOCK = threading.Lock()


def _load() -> tuple[Any, Any]:  # (messages, services): modules built at run time, nothing static to type
    # protos_and_services resolves the file against sys.path: put this directory first, only for the call.
    with _LOCK:
        sys.path.insert(0, _HERE)
        try:
            return grpc.protos_and_services("pubsub_api.proto")
        finally:
            sys.path.remove(_HERE)


pb, services = _load()

# Replay ids are opaque bytes to the protocol: the subscriber saves, compares (for equality only) and resumes them as
# the org gave them. Salesforce's happen to be a big-endian long today, which is also the ``replayId`` integer the
# Streaming API (CometD) shows; these helpers exist for that display form and for tests, never for ordering.


def replay_as_long(replay_id: bytes | None) -> int | None:
    """The replay id as the CometD ``replayId`` long when it is 8 bytes (Salesforce's form today), else None."""
    return int.from_bytes(replay_id, "big") if replay_id is not None and len(replay_id) == 8 else None


def replay_to_int(replay_id: bytes) -> int:
    """An 8-byte replay id as its integer (tests and benchmarks against the emulator's default ids)."""
    return int.from_bytes(replay_id, "big")


def int_to_replay(value: int) -> bytes:
    return value.to_bytes(8, "big")
