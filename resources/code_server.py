"""The platform's code server: Dagster's gRPC code server (`dagster api grpc`, the same options) whose run workers
start warm.

Dagster's code server starts every run worker as a fresh Python process (`multiprocessing`'s spawn), which imports
Dagster, the instance's storage and the code location again before the run's first step: 7-9 s of CPU on two busy
cores, against 0.4 s for a child forked from a process that imported them once (`python -m bench.startup --warm`;
bench/RESULTS.md, "Freshness under load, on a quiet machine"). Here the workers are forked from a forkserver that
imported Dagster and the code location's module when the server started. A forkserver is a process of its own,
started clean (no threads, no open connections, no Spark), so forking it is safe where forking the server would
not be. Everything else is Dagster's own: the worker runs Dagster's `start_run_in_subprocess` with the same
arguments, reports its pid in the "Started process for run" event (run_liveness_sensor reads it) and stops on the
same termination event, so cancelling a run, run monitoring and the liveness checks work as with spawn.

The worker still reads the code from the preloaded modules: a code change needs the code server restarted, as it
does for the loaded definitions anyway (deploy/sf-cdc-code-server.service). Where the operating system has no
forkserver (not Linux or macOS), the server falls back to Dagster's spawn.

    python -m resources.code_server --host 127.0.0.1 --port 4266 --working-directory . --module-name definitions
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Sequence

from dagster._cli.api import grpc_command
from dagster._grpc import server as grpc_server
from dagster._grpc.types import ExecuteExternalJobArgs
from dagster._serdes import deserialize_value

PRELOADED = ("dagster", "dagster._grpc.impl")  # what every run worker imports before the code location's module


class WarmApiServer(grpc_server.DagsterApiServer):
    """Dagster's servicer, its run workers forked from a forkserver that preloaded Dagster and the code location."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "forkserver" not in multiprocessing.get_all_start_methods():
            self._logger.warning("No forkserver on this platform: run workers start as fresh processes (spawn)")
            return
        origin = kwargs.get("loadable_target_origin")
        module, folder = getattr(origin, "module_name", None), getattr(origin, "working_directory", None)
        if folder and folder not in sys.path:  # the forkserver imports the module with the server's sys.path
            sys.path.insert(0, folder)
        preload = [*PRELOADED, *([module] if module else [])]
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(preload)
        self._mp_ctx = context  # DagsterApiServer.StartRun starts its run workers from this context
        # Started now, in the background, so the first run does not wait for the imports.
        threading.Thread(target=_start_forkserver, name="forkserver", daemon=True).start()
        self._logger.info(f"Run workers fork from a forkserver that preloads {', '.join(preload)}")

    def StartRun(self, request, context):  # noqa: N802 (Dagster's gRPC method name)
        reply = super().StartRun(request, context)
        run_id = deserialize_value(request.serialized_execute_run_args, ExecuteExternalJobArgs).run_id
        with self._execution_lock:
            process = self._executions.get(run_id, (None,))[0]
        if process is not None:
            self._logger.info(f"Run {run_id}: worker pid {process.pid}, started by {self._mp_ctx.get_start_method()}")
        return reply


def _start_forkserver() -> None:
    from multiprocessing import forkserver

    forkserver.ensure_running()


def main(argv: Sequence[str] | None = None) -> int:
    # `dagster api grpc` builds its servicer from this module attribute (imported inside the command).
    grpc_server.DagsterApiServer = WarmApiServer  # type: ignore[misc]
    grpc_command.main(args=list(argv) if argv is not None else None, prog_name="python -m resources.code_server")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
