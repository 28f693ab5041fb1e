"""One writer per table on this host, whatever Dagster's pool queue decides (README "Dagster instance").

Every step that writes a table runs in the table's Dagster pool (`replica_<Object>`, `change_events`), one slot
each. Dagster's slot claim is not atomic, on its SQLite storage nor on PostgreSQL: two steps of different runs that
claim the same free slot within milliseconds can both be given it (each sees the slot free, each writes itself into
it: under `make e2e` on SQLite, two `salesforce__Account` steps started 3 ms apart). The claim (dagster's
`SqlEventLogStorage.claim_concurrency_slot`, the same code for both) picks a free slot row with `SELECT ... FOR
UPDATE SKIP LOCKED`, then writes the step into the row by id in a second statement; SQLite ignores `FOR UPDATE`,
and dagster-postgres connects in autocommit mode, where the row lock ends with the `SELECT`. Delta's optimistic commit then fails the second writer
(`ConcurrentWriteError`: nothing lost, the sensors run its work again), but a failed run is noise a person has to
read. So a step also holds an OS file lock named after its pool, on the host where run workers live (the
`DefaultRunLauncher`: every run is a process of this host): the second step waits for the first to end instead of
racing it. The lock lives under the instance's directory (`<DAGSTER_HOME>/pool_locks/<pool>.lock`); an ephemeral
instance (tests, `dg.materialize` in a notebook) runs one process and takes no lock. Across hosts Delta's commit
check stays the guard.

A step holds one pool only (no step writes two tables' pools), so the locks cannot deadlock.
"""

from __future__ import annotations

import fcntl
import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

LOCK_DIR = "pool_locks"

log = logging.getLogger(__name__)


@contextmanager
def host_lock(instance: dg.DagsterInstance, pool: str, logger=None) -> Iterator[None]:
    """Hold `pool`'s host lock (module docstring) while inside; none for an ephemeral instance."""
    if instance.is_ephemeral:
        yield
        return
    directory = Path(instance.root_directory) / LOCK_DIR
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{pool}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (logger or log).warning(
                f"pool {pool}: another step of this pool is running on this host (Dagster gave "
                f"both a slot); waiting for it to end"
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def exclusive(pool: str) -> Callable:
    """Decorator of an op's or asset's compute function (`context` first): its body runs holding `pool`'s host
    lock. Keeps the function's signature, so Dagster sees the context and resources the function declares."""

    def wrap(fn: Callable) -> Callable:
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def generator(context, *args, **kwargs):
                with host_lock(context.instance, pool, context.log):
                    yield from fn(context, *args, **kwargs)

            return generator

        @functools.wraps(fn)
        def function(context, *args, **kwargs):
            with host_lock(context.instance, pool, context.log):
                return fn(context, *args, **kwargs)

        return function

    return wrap
