"""The Dagster instance the demo (and the end-to-end tests) run against: a DAGSTER_HOME holding the repository's
`dagster.yaml` (the instance settings the platform depends on; README "Dagster instance").

Runs are queued (QueuedRunCoordinator) and every concurrency pool defaults to one slot: each replica asset has its
own pool (`replica_<Name>`) and change_events has `change_events`, so two runs never write the same Delta table at
once, while different tables still proceed in parallel. At most two runs go at once (a 2-core machine runs one
Spark driver per run), and only one of them a landing run. A run that was in flight when the processes died
(SIGKILL, power cut) would otherwise stay STARTED for ever, keep its pool slot and, since the reconciliation
sensor waits for in-flight runs of an object, stall that object. The platform ends such runs on its own
(`run_liveness_sensor` and Dagster's run monitoring, dagster.yaml), within about a minute of starting again;
`fail_orphaned_runs` ends them at once when the demo starts (no process of an earlier session survives it), with
the same `end_run` the sensor uses.

The storage is Dagster's embedded SQLite in the home folder, or PostgreSQL (`storage="postgres"`): the block of
`deploy/dagster-postgres.yaml` appended, its `DAGSTER_PG_*` references kept (a production home: each process has
them in its environment) or replaced by the values of a local cluster (demo/postgres.py), so that every tool opening
the home (`python -m demo.latency`, the benches) reaches the database without them; the file is then 0600.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import dagster as dg
import yaml

from sensors.run_liveness import end_run

IN_FLIGHT = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


INSTANCE_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"
POSTGRES_YAML = INSTANCE_YAML.parent / "deploy" / "dagster-postgres.yaml"
Storage = Literal["sqlite", "postgres"]
STORAGES: tuple[Storage, ...] = ("sqlite", "postgres")


def instance_config(*, max_concurrent_runs: int | None = None, dequeue_interval_seconds: int | None = None) -> dict:
    """The repository's `dagster.yaml` (the settings the platform depends on), with optional overrides."""
    config = yaml.safe_load(INSTANCE_YAML.read_text())
    if max_concurrent_runs is not None:
        config["concurrency"]["runs"]["max_concurrent_runs"] = max_concurrent_runs
    if dequeue_interval_seconds is not None:
        config["run_coordinator"]["config"]["dequeue_interval_seconds"] = dequeue_interval_seconds
    return config


def postgres_storage(settings: Mapping[str, str] | None = None) -> str:
    """deploy/dagster-postgres.yaml's storage block as YAML: as is (`env:` references), or with each reference
    replaced by its value in `settings` (the `DAGSTER_PG_*` variables)."""
    if settings is None:
        return POSTGRES_YAML.read_text()
    block = yaml.safe_load(POSTGRES_YAML.read_text())
    db = block["storage"]["postgres"]["postgres_db"]
    for key, value in db.items():
        if isinstance(value, dict) and "env" in value:
            db[key] = settings[value["env"]]
    db["port"] = int(db["port"])
    return "# The local cluster's settings (demo/postgres.py), from deploy/dagster-postgres.yaml.\n" + yaml.safe_dump(
        block, sort_keys=False
    )


def write_dagster_home(
    home: Path, *, storage: Storage = "sqlite", pg: Mapping[str, str] | None = None, **options
) -> Path:
    """Create `home` with its dagster.yaml (rewritten every time, so a changed setting takes effect): the
    repository's dagster.yaml as is, or with `options` applied; with `storage="postgres"` followed by the storage
    block of deploy/dagster-postgres.yaml (`pg`: the values of its variables, written into the file)."""
    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if options:
        text = "# Written by demo/instance.py from the repository's dagster.yaml, with overrides.\n" + yaml.safe_dump(
            instance_config(**options), sort_keys=False
        )
    else:
        text = INSTANCE_YAML.read_text()
    if storage == "postgres":
        text += "\n" + postgres_storage(pg)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # it may hold the database password
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return home


def open_instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(Path(home).resolve()))


def in_flight_runs(instance: dg.DagsterInstance, *, queued: bool = True) -> list[dg.DagsterRun]:
    statuses = IN_FLIGHT + ([dg.DagsterRunStatus.QUEUED] if queued else [])
    return list(instance.get_runs(filters=dg.RunsFilter(statuses=statuses)))


def fail_orphaned_runs(home: Path) -> int:
    """Mark runs left in flight by a previous, killed session as failed and free their pool slots."""
    if not (Path(home) / "history").exists() and "storage" not in yaml.safe_load(
        (Path(home) / "dagster.yaml").read_text()
    ):
        return 0  # a new SQLite home: no run yet (PostgreSQL keeps nothing in the home to look at)
    with open_instance(home) as instance:
        orphans = in_flight_runs(instance, queued=False)
        return sum(
            end_run(
                instance,
                run,
                "the demo stopped while this run was in flight: marked failed, its pool "
                "slots freed; the sensors request its work again",
            )
            for run in orphans
        )
