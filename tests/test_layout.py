"""The folders depend on each other in one direction (style.md's layout): `definitions.py` assembles, `sensors/`
reads what `cdc_assets/` writes, `cdc_assets/` wires `resources/` and `spark_ops/`, and none of the product folders
imports the emulator (a development tool, not in the wheel)."""

from __future__ import annotations

import ast
import tomllib

import pytest
import setuptools
from settings import REPO

# folder -> folders it must never import
FORBIDDEN = {
    "cdc_assets": {"sensors", "salesforce_emulator", "definitions"},
    "resources": {"cdc_assets", "sensors", "salesforce_emulator", "definitions"},
    "spark_ops": {"cdc_assets", "sensors", "resources", "salesforce_emulator", "definitions", "dagster"},
    "sensors": {"salesforce_emulator", "definitions"},
    "cdc_subscriber": {"sensors", "salesforce_emulator", "definitions"},
}


def imported_packages(folder: str) -> dict[str, set[str]]:
    """Top-level package of every import (module level or inside a function) in each file of `folder`."""
    found = {}
    for path in sorted((REPO / folder).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(REPO))] = names
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_folders_import_in_one_direction(folder):
    wrong = {
        path: sorted(names & FORBIDDEN[folder])
        for path, names in imported_packages(folder).items()
        if names & FORBIDDEN[folder]
    }
    assert wrong == {}


def test_sensors_build_on_the_assets_and_definitions_assembles_both():
    assert any("cdc_assets" in names for names in imported_packages("sensors").values())
    assembly = {
        alias
        for node in ast.walk(ast.parse((REPO / "definitions.py").read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in [node.module.split(".")[0]]
    }
    assert {"cdc_assets", "sensors", "resources"} <= assembly


def test_the_product_package_ships_no_development_tools():
    """pyproject's package list (what `pip wheel .` builds) leaves the emulator, demo, bench and tests out."""
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = setuptools.find_packages(where=REPO, include=find["include"])
    assert {p.split(".")[0] for p in shipped} == {"cdc_assets", "resources", "sensors", "spark_ops", "cdc_subscriber"}


# Files besides the registry (cdc_assets/actions.py) that may hold a run action's name as a string, each for another
# thing the same word names: an object's source in the config model (`source: poll`) and its `formulas` key, and
# a row's origin (`_sf_source`, cdc_assets/records.py).
OTHER_MEANINGS = {
    "cdc_assets/config.py": {"poll", "formulas"},
    "cdc_assets/records.py": {"reconcile", "poll"},
}


def action_words() -> set[str]:
    from cdc_assets.actions import ACTIONS, DIRTY_RECORDS, INITIAL_LOAD, PENDING_RESYNC, POLL_HANDOFF

    return {*ACTIONS, PENDING_RESYNC, DIRTY_RECORDS, INITIAL_LOAD, POLL_HANDOFF}


def test_run_action_names_are_written_in_the_registry_only():
    """A run action, the work a sensor asks it for and the mode a run reports are named in cdc_assets/actions.py:
    every other module uses its entries (`APPLY.name`, `ACTIONS`), so an action is added or renamed in one place."""
    words = action_words()
    found = {}
    for folder in ("cdc_assets", "sensors", "resources"):
        for path in sorted((REPO / folder).rglob("*.py")):
            where = str(path.relative_to(REPO))
            if where == "cdc_assets/actions.py":
                continue
            literals = {
                node.value
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            }
            if wrong := (literals & words) - OTHER_MEANINGS.get(where, set()):
                found[where] = sorted(wrong)
    assert found == {}
