"""A Spark Connect server with the platform's settings: one long-lived, warm JVM that every run connects to.

Under the Dagster daemon every run is a new process. With a local master each one starts its own JVM and pays
its start and JIT warm-up again (bench/RESULTS.md, steady state: a run of ~1,000 events in a fresh process
against the same run as a client of a warm server). `python -m resources.spark_connect [--port 15002]` starts the
server; runs use it when `SPARK_REMOTE=sc://localhost:15002/;token=<its token>` is set. `make run` does both.

Whoever reaches the port gets a Spark session as the platform's user (Python UDFs run code, `spark.read` reads any
file it can), so the server is closed by default:
- it listens on loopback only (`spark.connect.grpc.binding.address`), as does its driver with a local master
  (`resources.spark.LOOPBACK_DRIVER_CONF`);
- it always requires a token (Spark's `spark.connect.authenticate.token`, handed to the JVM in its environment as
  `SPARK_CONNECT_AUTHENTICATE_TOKEN`, never on a command line): the one in that variable, or in `--token-file` (a
  file only its owner may read; made with a random token if missing), else a random one in a private file removed
  when the server stops; clients send it as
  `sc://localhost:<port>/;token=...` (PySpark sends a token without TLS to the host `localhost` only);
- Spark's Connect server speaks no TLS, so it binds another address (`--host`) only when told a TLS-terminating
  proxy fronts it (`--behind-tls-proxy`); docs/scaling.md says how to run one.

Once listening, the server warms its JVM up (`resources.spark_warm_up`: the platform's parse and fold over a
synthetic batch, in the background, ~11 s of both cores here) so that the first runs after a start, the backlog
that piled up while it was down, do not pay the JIT's first pass; `--warm-up-lines 0` skips it.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path

from pyspark.sql import SparkSession

from resources.network import is_loopback
from resources.spark import DEFAULT_CONF, spark_config
from resources.spark_warm_up import LINES, warm_up
from resources.storage import keep_private

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002
DEFAULT_HOST = "127.0.0.1"
# Spark's own name: the server reads the token from it, and so does PySpark's client when its URL has none.
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
TOKEN_CONF = "spark.connect.authenticate.token"
BINDING_CONF = "spark.connect.grpc.binding.address"
CONNECT_CONF = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    # A run killed before it released its session leaves it (and what it cached) behind until it idles out.
    "spark.connect.session.manager.defaultSessionTimeout": "10min",
}
WARM_UP_JOIN_SECONDS = 30.0  # how long a stop waits for a warm-up in progress to notice the session is gone
_TOKEN_PARAM = re.compile(r"(;token=)[^;]*")


class UnsafeServerSettings(ValueError):
    """The server was asked to start in a way that would expose it: it refuses, saying what to do instead."""


def url(port: int = DEFAULT_PORT, token: str | None = None, host: str = "localhost", *, tls: bool = False) -> str:
    """The `SPARK_REMOTE` of a server: `sc://host:port/;token=...` (`;use_ssl=true` through a TLS proxy).

    On loopback the host must be `localhost`: PySpark sends a token without TLS to that name only (to `127.0.0.1` it
    would try TLS, which the server does not speak)."""
    params = (";use_ssl=true" if tls else "") + (f";token={token}" if token else "")
    return f"sc://{host}:{port}/{params}" if params else f"sc://{host}:{port}"


def redacted(remote: str) -> str:
    """`remote` (a `SPARK_REMOTE`) with its token hidden: what may be printed or logged."""
    return _TOKEN_PARAM.sub(r"\1<hidden>", remote)


def check_binding(host: str, behind_tls_proxy: bool) -> None:
    """Refuse to listen beyond loopback unless a TLS-terminating proxy fronts the server (it speaks no TLS itself:
    the token, and every row, would cross the network in clear)."""
    if not is_loopback(host) and not behind_tls_proxy:
        raise UnsafeServerSettings(
            f"refusing to listen on {host}: Spark's Connect server has no TLS, so its token and every row would "
            "cross the network in clear. Keep the default (loopback) and put a TLS-terminating proxy in front on "
            "the same host (docs/scaling.md), or, if such a proxy on another host is the only client that can "
            "reach this address, say so with --behind-tls-proxy"
        )


def read_token_file(path: Path) -> str:
    """The token in `path`, a file only its owner may read (it grants a Spark session to whoever holds it)."""
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UnsafeServerSettings(
            f"refusing the token file {path}: others may read it (mode {stat.filemode(mode)}); run: chmod 600 {path}"
        )
    token = path.read_text().strip()
    if not token:
        raise UnsafeServerSettings(
            f"the token file {path} is empty: write a long random token into it, or remove it and a new one is made"
        )
    return token


def write_token_file(path: Path, token: str) -> None:
    """`token` into a new file `path` readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")


def server_token(environ: dict[str, str], token_file: Path | None) -> str:
    """The token clients must send: `TOKEN_ENV`'s, else `token_file`'s (a new random token written to it if it
    does not exist)."""
    if token := environ.get(TOKEN_ENV):
        return token
    if token_file is None:
        raise UnsafeServerSettings(f"no token: set {TOKEN_ENV} or give --token-file")
    if token_file.exists():
        return read_token_file(token_file)
    token = secrets.token_urlsafe(32)
    write_token_file(token_file, token)
    return token


def start(
    port: int = DEFAULT_PORT,
    overrides: dict[str, str] | None = None,
    *,
    token: str,
    host: str = DEFAULT_HOST,
    behind_tls_proxy: bool = False,
) -> SparkSession:
    """Start the server in this process (a local Spark session with the Connect plugin) listening on `host`
    (`check_binding` first), requiring `token`; return its session."""
    check_binding(host, behind_tls_proxy)
    overrides = dict(overrides or {})
    for key, instead in ((TOKEN_CONF, f"set {TOKEN_ENV} or --token-file"), (BINDING_CONF, "use --host")):
        if key in overrides:
            raise UnsafeServerSettings(f"{key} cannot be set with --conf: {instead}")
    os.environ.pop("SPARK_REMOTE", None)  # this process is the server, not a client
    # In the environment the JVM inherits: builder settings reach the JVM on its command line, which `ps` shows to
    # every user of the machine.
    os.environ[TOKEN_ENV] = token
    conf = spark_config(
        {
            "spark.master": DEFAULT_CONF["spark.master"],
            **CONNECT_CONF,
            BINDING_CONF: host,
            "spark.connect.grpc.binding.port": str(port),
            **overrides,
        }
    )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _warm_up(spark: SparkSession, lines: int) -> None:
    """`warm_up` in the background: runs connecting meanwhile share the cores with it; if it fails, the server
    serves on unwarmed (a warning says why)."""
    try:
        warm_up(spark, lines)
    except Exception as exc:  # noqa: BLE001 - a warm-up is an optimisation, never a reason to stop serving
        first = str(exc).splitlines()[:1]  # a bare AssertionError (a session stopped under it) has no message
        log.warning(
            "Spark warm-up failed (the server serves on, unwarmed): %s", ": ".join([type(exc).__name__, *first])
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m resources.spark_connect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}); another than loopback needs --behind-tls-proxy",
    )
    parser.add_argument(
        "--behind-tls-proxy",
        action="store_true",
        help="acknowledge that only a TLS-terminating proxy reaches --host (docs/scaling.md): the "
        "server itself speaks plaintext gRPC",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"the token clients must send, in a file only its owner may read (made with a random "
        f"token if missing); default: {TOKEN_ENV}, else a random token in a new private file",
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    parser.add_argument(
        "--warm-up-lines",
        type=int,
        default=LINES,
        metavar="N",
        help=f"synthetic lines the JVM is warmed up with once listening (default {LINES:,}; 0: none)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    scratch = None
    if args.token_file is None and not os.environ.get(TOKEN_ENV):
        scratch = Path(tempfile.mkdtemp(prefix="spark-connect-"))  # a folder only this user can open
        args.token_file = scratch / "token"
    try:
        _serve(args)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _serve(args: argparse.Namespace) -> None:
    where = f"the token in {TOKEN_ENV}" if os.environ.get(TOKEN_ENV) else f"the token in {args.token_file}"
    try:
        check_binding(args.host, args.behind_tls_proxy)  # before a token file is made
        keep_private()  # what the driver spills or caches of the org's rows
        token = server_token(dict(os.environ), args.token_file)
        spark = start(
            args.port,
            dict(c.split("=", 1) for c in args.conf),
            token=token,
            host=args.host,
            behind_tls_proxy=args.behind_tls_proxy,
        )
    except UnsafeServerSettings as exc:
        raise SystemExit(f"python -m resources.spark_connect: {exc}") from None
    clients = (
        redacted(url(args.port, "x"))
        if is_loopback(args.host)
        else redacted(url(args.port, "x", "<the proxy's host>", tls=True))
    )
    log.info(
        "Spark Connect server listening at %s:%d (Spark %s); clients: SPARK_REMOTE=%s with %s",
        args.host,
        args.port,
        spark.version,
        clients,
        where,
    )
    warming = None
    if args.warm_up_lines > 0:
        warming = threading.Thread(target=_warm_up, args=(spark, args.warm_up_lines), name="warm-up", daemon=True)
        warming.start()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    spark.stop()
    if warming is not None:
        # Its calls fail once the session is stopped: let it end before the interpreter does, since Python
        # finalizing while a thread is inside py4j aborts the process (SIGABRT; a supervisor records a failed stop).
        warming.join(timeout=WARM_UP_JOIN_SECONDS)


if __name__ == "__main__":
    main()
