"""A local S3 API for tests: moto's server in a child process on loopback, a random port, stopped with the session.

The server runs in its own process (not a thread of the test process): delta-rs may hold the GIL while it waits
for an answer from the server, and a test kills subprocess runs with SIGKILL while the store must stay up.

`python tests/s3_server.py` starts one, prints its port on the first line, and serves until its standard input
closes (the parent exits or closes it), so a crashed test session leaves no server behind.

`--ignore-conditional-writes` serves a store that accepts `If-None-Match` / `If-Match` and ignores them, as some
S3-compatible stores do: the fault resources/commit_safety.py must detect (moto itself honours them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def env(self) -> dict[str, str]:
        """The AWS_* variables delta-rs (object_store) and pyarrow.fs read to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def new_bucket(self, prefix: str = "cdc") -> str:
        """A fresh bucket; returns its name."""
        import pyarrow.fs as pafs

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        fs = pafs.S3FileSystem(
            endpoint_override=self.endpoint,
            scheme="http",
            region=REGION,
            access_key="testing",
            secret_key="testing",
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return name


@contextmanager
def s3_server(*, ignore_conditional_writes: bool = False) -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 at a random port, in a child process; stopped when the block ends."""
    flags = ["--ignore-conditional-writes"] if ignore_conditional_writes else []
    proc = subprocess.Popen(
        [sys.executable, __file__, *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = int(proc.stdout.readline().strip() or 0)
        assert port, "the moto S3 server did not start (is moto[server] installed? pip install -e '.[test]')"
        yield S3Server(f"http://127.0.0.1:{port}")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serve(ignore_conditional_writes: bool) -> None:
    import threading

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    moto = DomainDispatcherApplication(create_backend_app)

    def app(environ, start_response):
        if ignore_conditional_writes and environ.get("REQUEST_METHOD") == "PUT":
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        return moto(environ, start_response)

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_port, flush=True)
    sys.stdin.read()  # until the parent closes it, or exits
    server.shutdown()
    os._exit(0)


if __name__ == "__main__":
    _serve("--ignore-conditional-writes" in sys.argv[1:])
