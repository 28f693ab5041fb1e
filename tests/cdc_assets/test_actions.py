"""The run actions' registry (cdc_assets/actions.py): every action a replica run can do is one entry with its step
function; the asset body dispatches a run's `mode` to that entry, and the sensors' planner and the operator jobs are
derived from the same entries."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import get_args

import dagster as dg
import pytest
from docs_pages import code_blocks, section
from harness import Platform
from settings import TEST_SPARK_CONF
from subscriber_harness import resource

from cdc_assets import actions
from cdc_assets.actions import (
    ACTIONS,
    APPLY,
    ASKED_FOR,
    DIRTY_RECORDS,
    INITIAL_LOAD,
    PENDING_RESYNC,
    RECONCILE,
    RESYNC,
    ActionRun,
    ReplicaRunConfig,
    carried_by,
)
from cdc_assets.assets import replica_key
from cdc_assets.operate.asks import asks_of
from cdc_assets.operate.jobs import build_ask_job
from replication.config import parse_config
from salesforce_emulator import Emulator

OBJECT = "Account"


@pytest.fixture
def org(tmp_path):
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing") as emu:
        yield emu


def test_every_action_is_an_entry_named_by_its_key_with_a_step_function():
    assert ACTIONS and all(key == action.name and callable(action.step) for key, action in ACTIONS.items())
    # The op config accepts exactly the registered names (the launchpad offers them).
    assert get_args(ReplicaRunConfig.model_fields["mode"].annotation) == tuple(ACTIONS)


def test_the_how_to_example_keeps_every_registered_action():
    """docs/development/index.md shows `ACTIONS` with a new entry: copied as written, it must keep every entry the
    registry has, since an entry left out of the tuple is silently no action any more."""
    (example,) = code_blocks("How to add a run action", "python")
    tree = ast.parse(example)
    defined = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    (listed,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign | ast.Assign)
        for target in [node.target if isinstance(node, ast.AnnAssign) else node.targets[0]]
        if isinstance(target, ast.Name) and target.id == "ACTIONS"
    ]
    entries = [n.id for n in ast.walk(listed) if isinstance(n, ast.Name) and n.id.isupper()]
    assert [name for name in entries if name in defined] == ["REFETCH"]
    assert sorted(getattr(actions, name).name for name in entries if name not in defined) == sorted(ACTIONS)
    # The section's opening sentence names them all too.
    opening = section("How to add a run action").split(". ", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", opening)) == sorted(ACTIONS)


def test_each_piece_of_work_is_asked_of_one_action_and_a_resync_run_carries_a_reconcile():
    assert set(ASKED_FOR) == {PENDING_RESYNC, DIRTY_RECORDS, INITIAL_LOAD}
    assert (ASKED_FOR[PENDING_RESYNC], ASKED_FOR[DIRTY_RECORDS], ASKED_FOR[INITIAL_LOAD]) == (RESYNC, RECONCILE, APPLY)
    # A resync rewrites every row, dirty ones too: a resync run in flight holds a reconcile back, not the other way.
    assert (carried_by(DIRTY_RECORDS), carried_by(PENDING_RESYNC)) == (
        [DIRTY_RECORDS, PENDING_RESYNC],
        [PENDING_RESYNC],
    )


def test_the_operator_jobs_are_one_per_action_with_a_job_and_refuse_objects_outside_its_sources(tmp_path):
    config = parse_config("objects:\n  - Account\n  - {name: Campaign, source: poll}\n", tmp_path / "r.yaml")
    jobs = {a.name: build_ask_job(a, replication=config) for a in ACTIONS.values() if a.job}
    assert sorted(job.name for job in jobs.values()) == ["describe_objects", "reconcile_objects", "resync_objects"]
    instance = dg.DagsterInstance.ephemeral()

    def ask(action: str, objects: list[str]) -> str:
        run = jobs[action].execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={"ops": {f"{action}_objects_op": {"config": {"objects": objects}}}},
        )
        failures = [e for e in run.all_events if e.is_step_failure]
        return failures[0].step_failure_data.error.message if failures else ""

    assert "only objects with source cdc" in ask("reconcile", ["Campaign"])  # a polled object has no dirty records
    assert "not in replication.yaml: Acount" in ask("resync", ["Acount"]) and "nothing" in ask("describe", [])
    assert asks_of(instance, config.names) == {}  # nothing refused was asked
    assert ask("resync", ["Account", "Campaign"]) == ""
    assert {n: a.action for n, a in asks_of(instance, config.names).items()} == dict.fromkeys(config.names, "resync")


def run_replica(platform: Platform, mode: str) -> dg.ExecuteInProcessResult:
    key = replica_key(OBJECT)
    return dg.materialize(
        [a for a in platform.executable_assets() if key in a.keys],
        resources=platform.defs.resources,
        instance=platform.instance,
        selection=[key],
        run_config={"ops": {key.to_python_identifier(): {"config": {"mode": mode, "transaction_close_after": 0}}}},
    )


def test_the_asset_runs_the_step_registered_for_the_mode_its_run_names(tmp_path, org, monkeypatch):
    platform = Platform(
        tmp_path / "p",
        None,
        [OBJECT],
        TEST_SPARK_CONF,
        salesforce=resource(org),
        initial_load=True,
        formulas={"refresh_every": 3600},
    )
    assert run_replica(platform, APPLY.name).success  # no table yet: whatever the action, the run loads it first
    assert platform.materialization_of(OBJECT)["mode"] == INITIAL_LOAD
    for name, action in list(ACTIONS.items()):
        calls: list[ActionRun] = []

        def spy(run: ActionRun, step=action.step, calls=calls):
            calls.append(run)
            return step(run)

        monkeypatch.setitem(ACTIONS, name, replace(action, step=spy))
        assert run_replica(platform, name).success, name
        assert [(c.sobject.name, c.config.mode) for c in calls] == [(OBJECT, name)]
        assert platform.materialization_of(OBJECT)["mode"] == name
