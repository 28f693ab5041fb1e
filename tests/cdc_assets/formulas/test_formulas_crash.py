"""Formula refresh runs killed (SIGKILL, a real subprocess) at every formula fault point, then run again: the
replicas end as a clean refresh leaves them (formula values equal to the org, no other column changed), and a run
killed between two commits of one Bulk job resumes that job after its last committed page."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from crash_runner import run_mode
from harness import Platform, comparable
from org_compare import differences, formula_differences
from settings import REPO, TEST_SPARK_CONF

from object_schema.describe import FORMULAS_AT
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload
from shared.faults import FORMULA_POINTS

OBJECTS = ["Account", "Contact"]
# Pages of 5 records, a commit every 10: each object's refresh takes several commits of one Bulk job.
OPTIONS = {"formulas": {"refresh_every": 3600, "merge_rows": 10}, "bulk_page_size": 5}


def platform_at(root: Path, env: dict) -> Platform:
    salesforce = SalesforceResource(
        instance_url=env["SF_INSTANCE_URL"], access_token=env["SF_ACCESS_TOKEN"], ca_bundle=env["SF_CA_BUNDLE"]
    )
    return Platform(root, None, OBJECTS, TEST_SPARK_CONF, initial_load=True, salesforce=salesforce, **OPTIONS)


def tables(platform: Platform) -> dict:
    """The replicas without the times a run writes (`_sf_synced_at`, `_sf_formulas_at`: when it read the org)."""
    return {
        o: comparable({i: {k: v for k, v in r.items() if k != FORMULAS_AT} for i, r in platform.rows(o).items()})
        for o in OBJECTS
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory, spark):
    """A replicated org whose formula values then moved without an event on the contacts (every account's industry
    and revenue changed, applied by CDC), and the tables a clean formula refresh makes of it."""
    base = tmp_path_factory.mktemp("formulas")
    start = base / "start"
    with Emulator(base / "org", landing_dir=start / "landing") as emu:
        Workload(emu, seed=7).build_org(accounts=12)
        env = {"SF_INSTANCE_URL": emu.instance_url, "SF_ACCESS_TOKEN": emu.token, "SF_CA_BUNDLE": str(emu.ca_file)}
        platform = platform_at(start, env)
        assert platform.run().success
        with emu.store.transaction() as txn:
            for n, account in enumerate(emu.store.ids("Account")):
                txn.update("Account", account, {"Industry": "Utilities", "AnnualRevenue": 1_000_000 + n})
        emu.flush_cdc()
        assert platform.run(close_after=0).success
        assert formula_differences(emu, "Contact", platform.rows("Contact"))
        clean = platform_at(shutil.copytree(start, base / "clean"), env)
        assert run_mode(clean, "formulas").success
        for name in OBJECTS:
            assert differences(emu, name, clean.rows(name)) == []
            assert formula_differences(emu, name, clean.rows(name)) == []
        yield {"start": start, "env": env, "clean": tables(clean), "emu": emu}


def kill_refresh(spark, root: Path, point: str, env: dict) -> None:
    """A formula refresh of every replica in a subprocess (tests/crash_runner.py) on this process's Spark JVM,
    SIGKILLed at `point`."""
    gateway = spark.sparkContext._gateway.gateway_parameters
    env = {
        **os.environ,
        **env,
        "CDC_FAULT_POINT": point,
        "CDC_FAULT_ACTION": "kill",
        "CRASH_RUNNER_OPTIONS": json.dumps(OPTIONS),
        "PYSPARK_GATEWAY_PORT": str(gateway.port),
        "PYSPARK_GATEWAY_SECRET": gateway.auth_token,
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "crash_runner.py"), str(root), "-", ",".join(OBJECTS), "formulas"],
        env=env,
        cwd=REPO,
        capture_output=True,
        timeout=600,
    )
    spark.catalog.clearCache()
    assert proc.returncode == -signal.SIGKILL, f"{point} was not reached: {proc.stderr.decode()[-2000:]}"


@pytest.mark.parametrize("point", FORMULA_POINTS)
def test_sigkill_during_a_formula_refresh_then_rerun_equals_a_clean_refresh(point, tmp_path, spark, world):
    platform = platform_at(shutil.copytree(world["start"], tmp_path / "p"), world["env"])
    kill_refresh(spark, platform.root, point, world["env"])
    result = run_mode(platform, "formulas")
    assert result.success
    assert tables(platform) == world["clean"]
    for name in OBJECTS:
        assert formula_differences(world["emu"], name, platform.rows(name)) == []
    if point == "formulas.after_batch_commit":  # killed between two commits of the Account job: resumed
        meta = platform.materialization(result, "Account")
        assert meta["formulas_resumed"] == 1 and meta["formulas_full_pass"] == 1
        assert len({r[FORMULAS_AT] for r in platform.rows("Account").values()}) == 1  # the killed job's read time
