"""The kill suite for history tables: a run SIGKILLed at any history point (or at the replica's commit around it),
then a re-run, gives the same replica and the same history as a run that never died.

Two stages of the golden sample: the first applied cleanly (the history exists), the second in the killed run, so
every point is hit with versions to stage and land: `history.after_stage` (staged, replica not committed: the file
is never named), `replica.after_commit` (replica committed, history not: the re-run lands the staged file),
`history.before_commit` / `history.after_commit` (around the history's merge). Plus a resync against an emulator
org, killed around the history commit that lands the snapshot's versions (read from the replica's Change Data Feed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from crash_runner import kill_run, run_mode
from harness import Platform, comparable, load_lines
from settings import TEST_SPARK_CONF

from replication.history.stage import history_name
from resources.salesforce import SalesforceResource
from resources.staged import STAGED
from salesforce_emulator import Emulator, FaultConfig
from salesforce_emulator.workload import Workload
from shared.faults import HISTORY_POINTS

OBJECTS = ["Account", "Contact", "Opportunity"]
OPTIONS = {"history": True}
KILL_POINTS = [*HISTORY_POINTS, "replica.before_commit", "replica.after_commit"]
# What makes two histories the same (validity times of sync versions come from the run's clock for records a
# resync finds gone, so compared through the version numbers and chain instead).
HISTORY_KEYS = ("_version", "_transaction_key", "_change_type", "_is_current", "_sf_source", "_sf_deleted")


def histories(platform: Platform, objects=OBJECTS) -> dict:
    out = {}
    for name in objects:
        rows = platform.table(history_name(name))
        out[name] = sorted(
            ({k: v for k, v in r.items() if k in HISTORY_KEYS or not k.startswith("_")} for r in rows),
            key=lambda r: (r["Id"], r["_version"]),
        )
    return json.loads(json.dumps(out, default=str))


def state(platform: Platform, objects=OBJECTS) -> dict:
    return {"replicas": {o: comparable(platform.rows(o)) for o in objects}, "histories": histories(platform, objects)}


def sample_platform(root: Path, sample_dir: Path, lines: list[str]) -> Platform:
    platform = Platform(root, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF, **OPTIONS)
    platform.land(lines[:6], name="a.jsonl")
    assert platform.run().success
    platform.land(lines[6:], name="b.jsonl")
    return platform


@pytest.fixture(scope="module")
def clean(tmp_path_factory, spark, sample_dir):
    lines = load_lines(sample_dir / "events.jsonl")
    platform = sample_platform(tmp_path_factory.mktemp("clean"), sample_dir, lines)
    assert platform.run().success
    snapshot = state(platform)
    assert sum(len(v) for v in snapshot["histories"].values()) >= 8
    return lines, snapshot


@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_a_history_point_then_rerun_gives_the_same_history(point, tmp_path, spark, sample_dir, clean):
    lines, expected = clean
    platform = sample_platform(tmp_path, sample_dir, lines)
    kill_run(
        spark, tmp_path, point, str(sample_dir / "describe"), OBJECTS, env={"CRASH_RUNNER_OPTIONS": json.dumps(OPTIONS)}
    )
    assert platform.run().success
    assert state(platform) == expected
    staged = platform.warehouse / STAGED
    assert not [p for p in staged.rglob("*") if p.is_file()], "every staged file landed or removed"


def test_a_staged_file_no_commit_names_is_never_landed(tmp_path, spark, sample_dir, clean):
    lines, expected = clean
    platform = sample_platform(tmp_path, sample_dir, lines)
    kill_run(
        spark,
        tmp_path,
        "history.after_stage",
        str(sample_dir / "describe"),
        OBJECTS,
        env={"CRASH_RUNNER_OPTIONS": json.dumps(OPTIONS)},
    )
    orphans = list((platform.warehouse / STAGED).rglob("*.parquet"))
    assert orphans, "the killed run staged its versions"
    platform.land(lines[6:], name="b-again.jsonl")  # the same events again: counted duplicates, nothing new
    assert platform.run().success
    assert state(platform) == expected


# -- a resync: versions read from the replica's Change Data Feed ----------------------------------------------------


@pytest.fixture(scope="module")
def org_world(tmp_path_factory, spark):
    base = tmp_path_factory.mktemp("org")
    start = base / "start"
    with Emulator(base / "org", landing_dir=start / "landing") as emu:
        workload = Workload(emu, seed=8, large_transaction=(25, 35), person_accounts=False)
        workload.build_org(accounts=10)
        env = {"SF_INSTANCE_URL": emu.instance_url, "SF_ACCESS_TOKEN": emu.token, "SF_CA_BUNDLE": emu.ca_file}
        platform = org_platform(start, env)
        assert platform.run().success
        emu.set_faults(FaultConfig(overflow_threshold=20, seed=1))
        workload.run(changes=40)
        workload.large("Contact")
        emu.flush_cdc()
        assert platform.run(close_after=0).success
        emu.set_faults(FaultConfig())
        workload.run(changes=20)  # the org moves on: the resync finds records changed
        clean = copy_platform(start, base / "clean", env)
        assert run_mode(clean, "resync").success
        yield {"start": start, "env": env, "clean": state(clean, ["Account", "Contact"])}


def org_platform(root: Path, env: dict) -> Platform:
    salesforce = SalesforceResource(
        instance_url=env["SF_INSTANCE_URL"], access_token=env["SF_ACCESS_TOKEN"], ca_bundle=env["SF_CA_BUNDLE"]
    )
    return Platform(
        root, None, ["Account", "Contact"], TEST_SPARK_CONF, initial_load=True, salesforce=salesforce, **OPTIONS
    )


def copy_platform(start: Path, root: Path, env: dict) -> Platform:
    shutil.copytree(start, root)
    return org_platform(root, env)


@pytest.mark.parametrize("point", ["history.before_commit", "history.after_commit"])
def test_sigkill_while_landing_a_resync_then_rerun_gives_the_same_history(point, tmp_path, spark, org_world):
    platform = copy_platform(org_world["start"], tmp_path / "p", org_world["env"])
    env = {**org_world["env"], "CRASH_RUNNER_OPTIONS": json.dumps(OPTIONS)}
    kill_run(spark, platform.root, point, "-", ["Account", "Contact"], "resync", env)
    assert run_mode(platform, "resync").success
    got = state(platform, ["Account", "Contact"])
    assert got == org_world["clean"]
    assert any(v["_sf_source"] == "snapshot" and v["_version"] > 1 for v in got["histories"]["Contact"])
