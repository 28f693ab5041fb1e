"""End-to-end fixtures: the emulator, a temp DAGSTER_HOME and `dagster dev` (webserver + the real daemon) as
subprocesses, with both sensors running against a replication.yaml of the five workload objects.

One stack serves the whole session (starting Dagster and loading the code location takes a while on 2 cores):
test_daemon drives a large workload through it, test_ui photographs its UI. test_crash_recovery has a stack of its
own (`daemon_stack`: `dagster-daemon run` alone, as under a supervisor), since it kills and restarts the daemon;
test_living_org_daemon too (`living_stack`), since it changes the org's schema. These tests run only when asked for
(`make e2e`, i.e. `pytest -m e2e tests/e2e`); a plain `pytest` run skips them.

A stack's Dagster instance is SQLite in its DAGSTER_HOME, or PostgreSQL: a database of its own on the session's
throwaway cluster (the `postgres` fixture). A daemon test module runs on both with the mark `pytest.mark.parametrize("storage", STORAGES, indirect=True,
scope="session")`, which makes `stack` and `daemon_stack` once per storage; the UI's tests run on SQLite.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from harness import write_config

from cdc_assets.names import META_APPLIED_THROUGH, META_DIRTY, META_HELD, META_RESYNC, replica_key
from demo import postgres as pg
from demo import processes
from demo.instance import in_flight_runs, open_instance, write_dagster_home
from demo.main import WORKSPACE
from replication.changefeed.reader import ChangefeedReader
from replication.history.catch_up import DATA_OPERATIONS
from replication.ingest import pending_files
from replication.state import IngestState
from resources.delta import CHANGE_EVENTS, DeltaWarehouse, read_table
from resources.landing_zone import LandingZone
from salesforce_emulator import Emulator
from salesforce_emulator.custom_objects import custom_object_name
from salesforce_emulator.workload import OBJECTS, Workload

ACCOUNTS = 300


def newest_data_version(table: DeltaTable, lookback: int = 50) -> int:
    """The newest version of `table` that changed data (upkeep's OPTIMIZE and VACUUM commits change none)."""
    return max((int(c["version"]) for c in table.history(lookback) if c.get("operation") in DATA_OPERATIONS), default=0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "e2e" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="end-to-end (minutes, real Dagster daemon and browser): run `make e2e`")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


@dataclass
class Stack:
    root: Path
    emu: Emulator
    workload: Workload
    home: Path
    ui_url: str
    process: object
    objects: tuple[str, ...] = OBJECTS
    env: dict[str, str] = field(default_factory=dict)  # the code location's environment
    polled: frozenset[str] = frozenset()  # `source: poll` objects: their replicas apply no events

    @property
    def landing(self) -> Path:
        return self.root / "landing"

    @property
    def warehouse(self) -> Path:
        return self.root / "warehouse"

    @contextmanager
    def instance(self):
        with open_instance(self.home) as instance:
            yield instance

    def rows(self, name: str) -> dict[str, dict]:
        path = self.warehouse / name
        if not (path / "_delta_log").exists():
            return {}
        return {r["Id"]: r for r in read_table(DeltaTable(str(path))).to_pylist()}

    def feed(self, name: str) -> ChangefeedReader:
        return ChangefeedReader(str(self.root / "changefeed" / name))

    def materializations(self, instance: dg.DagsterInstance, name: str) -> list[dict]:
        """Metadata of every materialization of replica `name`, oldest first."""
        records = instance.fetch_materializations(replica_key(name), limit=10_000, ascending=True).records
        return [{k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records]

    def unsettled(self) -> str | None:
        """Why the platform is not at rest yet, or None: no run queued or in flight, every landing file ingested,
        every replica applied through its object's newest ingested rows with nothing held, dirty or waiting for a
        resync, and every changefeed exported through its replica's newest version that changed data (the platform's
        own rules: `replicas_to_include` compares with the object's `entity_seq`; an upkeep's OPTIMIZE commit changes
        no data, so no feed exports it)."""
        with self.instance() as instance:
            if runs := in_flight_runs(instance):
                return f"{len(runs)} runs queued or in flight"
            warehouse = DeltaWarehouse(root=str(self.warehouse))
            if pending := pending_files(warehouse, LandingZone(path=str(self.landing))):
                return f"{len(pending)} landing files not ingested"
            entity_seq = IngestState.read(warehouse, warehouse.table(CHANGE_EVENTS)).entity_seq
            for name in self.objects:
                event = instance.get_latest_materialization_event(replica_key(name))
                if event is None:
                    return f"{name} not materialized yet"
                meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
                if meta.get(META_DIRTY) or meta.get(META_RESYNC) or meta.get(META_HELD):
                    return (
                        f"{name}: dirty {meta.get(META_DIRTY)}, resync {meta.get(META_RESYNC)!r}, "
                        f"held {meta.get(META_HELD)}"
                    )
                if name not in self.polled and int(meta.get(META_APPLIED_THROUGH) or 0) < int(entity_seq.get(name, 0)):
                    return f"{name} applied through {meta.get(META_APPLIED_THROUGH)} of {entity_seq.get(name)}"
                version = newest_data_version(DeltaTable(str(self.warehouse / name)))
                exported = self.feed(name).version()
                if exported is None or exported < version:
                    return f"{name}'s changefeed exported through version {exported} of {version}"
        return None

    def kill_process_group(self) -> float:
        """SIGKILL Dagster's process group (the daemon, its code server and run workers), as a host would lose
        them; when (epoch seconds)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return time.time()

    def restart_daemon(self) -> None:
        """What a supervisor does once the daemon is gone: start `dagster-daemon run` again, nothing else."""
        self.process = start_daemon(self.env, self.root)

    def wait_settled(self, timeout_seconds: float = 600.0, poll_seconds: float = 5.0) -> float:
        """Seconds until the platform is at rest (seen twice in a row); fails with the last reason on timeout."""
        started = time.monotonic()
        calm, reason = 0, None
        while time.monotonic() - started < timeout_seconds:
            reason = self.unsettled()
            calm = calm + 1 if reason is None else 0
            if calm == 2:
                return time.monotonic() - started
            time.sleep(poll_seconds)
        pytest.fail(f"sensors did not settle within {timeout_seconds:.0f} s: {reason}")


@contextmanager
def open_stack(
    root: Path,
    *,
    daemon_only: bool = False,
    cluster: pg.LocalPostgres | None = None,
    custom_objects: int = 0,
    **options: object,
):
    """The emulator org (ACCOUNTS accounts), a Spark Connect server and Dagster with every sensor running: `dagster
    dev` (webserver + daemon), or with `daemon_only` the daemon alone (`dagster-daemon run`, which starts the code
    server; the run workers are its children), as a supervisor would run it in production. The instance is on
    SQLite, or with `cluster` in a database of its own there (named after `root`). `options` go into the
    replication.yaml's options. With `custom_objects` N the org's generated custom objects `Thing_001__c` ... are
    replicated too (as `per_object` says: polled, for instance) and the workload changes them."""
    emu = Emulator(root / "org", landing_dir=root / "landing", roll_seconds=3.0, custom_objects=custom_objects)
    # diffs: FaultConfig's default, 1000
    workload = Workload(emu, seed=42, long_text=True, person_accounts=True, custom_objects=custom_objects)
    workload.build_org(accounts=ACCOUNTS)
    emu.start()
    objects = (*OBJECTS, *(custom_object_name(n) for n in range(1, custom_objects + 1)))
    config = write_config(
        root / "replication.yaml",
        None,
        list(objects),
        close_after=10,
        initial_load=True,
        changefeed={"uri": str(root / "changefeed"), "initial_scan": True},
        **options,
    )
    if cluster is not None:
        home = write_dagster_home(
            root / "dagster_home", storage="postgres", pg=pg.database(cluster, root.name.lower()).env()
        )
    else:
        home = write_dagster_home(root / "dagster_home")
    with open_instance(home):  # creates the storage now: several processes creating it at once collide
        pass
    # As `make run`: the runs are clients of one Spark Connect server.
    spark_server, spark_url = processes.start_spark_connect(root / "spark_connect.log")
    env = processes.platform_env(
        home=home,
        config=config,
        landing=root / "landing",
        warehouse=root / "warehouse",
        emu=emu,
        extra={"SPARK_REMOTE": spark_url},
    )
    ui_url, process, stack = "", None, None
    try:
        if daemon_only:
            process = start_daemon(env, root)
        else:
            port = processes.free_port()
            process = processes.start(
                ["dagster", "dev", "-w", str(WORKSPACE), "-h", "127.0.0.1", "-p", str(port)],
                env,
                log_file=root / "dagster.log",
            )
            ui_url = f"http://127.0.0.1:{port}"
            processes.wait_for_code_location(ui_url, process)
        per_object: dict = options.get("per_object") or {}  # type: ignore[assignment]
        polled = frozenset(n for n, o in per_object.items() if o.get("source") == "poll")
        stack = Stack(root, emu, workload, home, ui_url, process, objects=objects, env=env, polled=polled)
        yield stack
    finally:
        if (current := stack.process if stack else process) is not None:  # a test may have restarted the daemon
            processes.stop(current)
        processes.stop(spark_server)
        emu.stop()
        print(f"\nDagster log: {root / 'dagster.log'}")


def start_daemon(env: dict[str, str], root: Path):
    """`dagster-daemon run` in its own process group (its code server and run workers join it), log appended."""
    return processes.start(["dagster-daemon", "run", "-w", str(WORKSPACE)], env, log_file=root / "dagster.log")


@pytest.fixture(scope="session")
def storage(request: pytest.FixtureRequest) -> str:
    """The instance's storage: a module's `ON_EVERY_STORAGE` parameter, else SQLite."""
    return getattr(request, "param", "sqlite")


def storage_cluster(request: pytest.FixtureRequest, storage: str) -> pg.LocalPostgres | None:
    return request.getfixturevalue("postgres") if storage == "postgres" else None


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, storage: str):
    root = tmp_path_factory.mktemp(f"e2e_{storage}")
    with open_stack(root, cluster=storage_cluster(request, storage)) as stack:
        yield stack


@pytest.fixture(scope="module")
def daemon_stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, storage: str):
    """A stack of its own with `dagster-daemon run` alone (no webserver), for tests that kill and restart it."""
    root = tmp_path_factory.mktemp(f"daemon_{storage}")
    with open_stack(root, daemon_only=True, cluster=storage_cluster(request, storage)) as stack:
        yield stack


@pytest.fixture(scope="module")
def living_stack(tmp_path_factory: pytest.TempPathFactory):
    """A daemon stack of its own whose org's schema and permissions the test changes, with the describe sensor
    asking every 15 s of Account, the object it changes (a field made readable is found within the test's
    minutes; the other objects keep the default, so the sensors settle between the test's steps), and Contact
    polled every 15 s (a field of a polled object changes type too)."""
    root = tmp_path_factory.mktemp("living")
    per_object = {
        "Account": {"describe_every": 15},
        "Contact": {"source": "poll", "poll_interval": 15, "describe_every": 15},
    }
    with open_stack(root, daemon_only=True, per_object=per_object) as stack:
        yield stack


@pytest.fixture(scope="module")
def many_objects_stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """A daemon stack of its own with the test module's `CUSTOM` generated custom objects polled every `INTERVAL`
    seconds besides the five CDC objects; the describe sensor asks `BREAKS`'s describe() every `INTERVAL` too (the
    module deletes one of its fields)."""
    custom, interval, breaks = (getattr(request.module, n) for n in ("CUSTOM", "INTERVAL", "BREAKS"))
    polled = {custom_object_name(n): {"source": "poll", "poll_interval": interval} for n in range(1, custom + 1)}
    polled[breaks]["describe_every"] = interval
    root = tmp_path_factory.mktemp("many")
    with open_stack(root, daemon_only=True, custom_objects=custom, per_object=polled) as stack:
        yield stack
