"""The host lock of a pool (resources/pool_lock.py): two steps of one pool given a slot each by Dagster's racy claim
run one after the other on this host, not at once; with the real instance of the shipped dagster.yaml, and on the
platform's real step functions."""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest

from demo import postgres as pg
from demo.instance import STORAGES, open_instance, write_dagster_home
from resources.pool_lock import exclusive, host_lock


@pytest.fixture(params=STORAGES)
def instance(tmp_path, request):
    """The shipped instance, on SQLite and on PostgreSQL (whose slot claim is not one transaction either: the lock
    is kept there, docs/operations/dagster-postgres.md)."""
    pg_env = (
        pg.database(request.getfixturevalue("postgres"), "pool_lock").env() if request.param == "postgres" else None
    )
    with open_instance(write_dagster_home(tmp_path / "home", storage=request.param, pg=pg_env)) as instance:
        yield instance


class Context:
    """What `exclusive` reads of a step's context."""

    def __init__(self, instance):
        self.instance = instance
        self.log = None


def overlap(instance, body, pool_of=lambda i: "replica_Account") -> bool:
    """Whether two threads running `body` (wrapped by `exclusive`) were ever inside it at once."""
    inside, seen = [], []

    def step(context, i):
        inside.append(i)
        seen.append(len(inside))
        yield from body()
        inside.remove(i)

    threads = [
        threading.Thread(target=lambda i=i: list(exclusive(pool_of(i))(step)(Context(instance), i))) for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return max(seen) > 1


def slow():
    time.sleep(0.5)
    yield "done"


def test_two_steps_of_one_pool_run_one_after_the_other(instance):
    assert not overlap(instance, slow)


def test_steps_of_different_pools_run_at_once(instance):
    assert overlap(instance, slow, pool_of=lambda i: f"replica_{i}")


def test_an_ephemeral_instance_takes_no_lock():
    with (
        dg.DagsterInstance.ephemeral() as instance,
        host_lock(instance, "replica_Account"),
        host_lock(instance, "replica_Account"),  # would wait for ever if it locked
    ):
        pass


def started(instance, step: str) -> bool:
    return any(
        e.step_key == step
        for run in instance.get_runs()
        for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
    )


def test_a_replica_step_waits_for_its_pools_lock(tmp_path, sample_dir, spark):
    # The platform's real replica step under a persistent instance: while another holder has replica_Account's
    # lock, the step does not write; once it is released, the step runs.
    from harness import Platform, load_lines
    from settings import TEST_SPARK_CONF

    platform = Platform(tmp_path / "p", sample_dir / "describe", ["Account"], TEST_SPARK_CONF)
    platform.land(load_lines(sample_dir / "events.jsonl"), name="events.jsonl")
    with open_instance(write_dagster_home(tmp_path / "home")) as instance:
        platform.instance = instance
        result = {}
        with host_lock(instance, "replica_Account"):
            runner = threading.Thread(target=lambda: result.update(run=platform.run(raise_on_error=False)))
            runner.start()
            deadline = time.monotonic() + 120
            while not started(instance, "salesforce__Account") and time.monotonic() < deadline:
                time.sleep(0.2)
            assert started(instance, "salesforce__Account")
            time.sleep(2)
            assert runner.is_alive() and platform.table("Account") == [], "the step wrote beside the lock's holder"
        runner.join(timeout=120)
        assert result["run"].success and platform.table("Account")
