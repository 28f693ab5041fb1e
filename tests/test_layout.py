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
    assert {p.split(".")[0] for p in shipped} == {
        "cdc_assets",
        "resources",
        "sensors",
        "spark_ops",
        "object_schema",
        "cdc_subscriber",
    }
