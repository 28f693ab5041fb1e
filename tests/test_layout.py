"""The folders depend on each other in one direction (style.md's layout): `definitions.py` assembles, `sensors/`
reads what `cdc_assets/` writes, `cdc_assets/` declares the Dagster definitions and calls the engine in
`replication/`, which imports no Dagster and wires `resources/` and `spark_ops/`; all read the describe model
(`object_schema/`), and none of the product folders imports the emulator (a development tool, not in the wheel).
The CDC subscriber and the platform import neither each other: what both need is in `shared/`, which imports
neither.

Inside `replication/` and `cdc_assets/` the modules stand in layers (docs/development/layout.md), and no import
points up: names (`cdc_assets/names.py`, which imports nothing of the project) and base (what replication.yaml says
and what the commits keep: `replication/config.py`, `*/config.py`, `api_name.py`, `state.py`) < steps (the work a
run does: every other module) < definitions (the modules declaring what Dagster loads: an asset, check, op, job or
spec; all in `cdc_assets/`)."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest
import setuptools
from settings import REPO

# folder -> folders it must never import
FORBIDDEN = {
    # The engine: no Dagster, and nothing above it.
    "replication": {
        "cdc_assets",
        "sensors",
        "cdc_subscriber",
        "salesforce_emulator",
        "definitions",
        "dagster",
        "dagster_pyspark",
        "dagster_deltalake",
    },
    "cdc_assets": {"sensors", "cdc_subscriber", "salesforce_emulator", "definitions"},
    "resources": {"replication", "cdc_assets", "sensors", "salesforce_emulator", "definitions"},
    "spark_ops": {"replication", "cdc_assets", "sensors", "resources", "salesforce_emulator", "definitions", "dagster"},
    "object_schema": {
        "replication",
        "cdc_assets",
        "sensors",
        "resources",
        "spark_ops",
        "cdc_subscriber",
        "salesforce_emulator",
        "definitions",
        "dagster",
    },
    "sensors": {"salesforce_emulator", "definitions"},
    # The subscriber is a service of its own, without Dagster or Spark: what it shares with the platform is in
    # shared/ (its one read of replication.yaml aside: CROSSING).
    "cdc_subscriber": {"cdc_assets", "sensors", "salesforce_emulator", "definitions", "dagster", "pyspark"},
    "shared": {
        "replication",
        "cdc_assets",
        "cdc_subscriber",
        "sensors",
        "spark_ops",
        "salesforce_emulator",
        "definitions",
        "dagster",
    },
}


PRODUCT = (
    "replication",
    "cdc_assets",
    "resources",
    "sensors",
    "spark_ops",
    "object_schema",
    "cdc_subscriber",
    "shared",
    "definitions",
)
NAMES, BASE, STEPS, DEFINITIONS = range(4)  # the layers inside cdc_assets, lowest first
BASE_MODULES = {"replication.config", "replication.api_name", "replication.state"}  # and every */config.py
# What declares a Dagster definition: a module calling one of these is in the definitions layer.
DECLARES = {
    "asset",
    "multi_asset",
    "asset_check",
    "multi_asset_check",
    "op",
    "graph",
    "job",
    "define_asset_job",
    "sensor",
    "schedule",
    "AssetSpec",
    "AssetCheckSpec",
}


def module_name(path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def project_imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """(node, module) of every import of a project module, at any depth (the module imported, or its package)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name) for a in node.names if a.name.split(".")[0] in PRODUCT]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in PRODUCT:
            found.append((node, node.module))
    return found


def in_functions(tree: ast.AST) -> set[int]:
    """Ids of the nodes inside a function body."""
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for inner in ast.walk(node)
    }


def declares_definitions(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "dg"
        and node.attr in DECLARES
        for node in ast.walk(tree)
    )


def layered_modules() -> dict[str, tuple[int, ast.AST]]:
    """Every module of replication/ and cdc_assets/ with its layer and syntax tree."""
    modules = {}
    for path in sorted([*(REPO / "replication").rglob("*.py"), *(REPO / "cdc_assets").rglob("*.py")]):
        name, tree = module_name(path), ast.parse(path.read_text())
        if name == "cdc_assets.names":
            layer = NAMES
        elif name in BASE_MODULES or name.endswith(".config"):
            layer = BASE
        else:
            layer = DEFINITIONS if declares_definitions(tree) else STEPS
        modules[name] = (layer, tree)
    return modules


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


# The one import of the platform by cdc_subscriber/: the subscriber's command line reads which objects follow CDC
# from replication.yaml through the platform's config model (validated as Dagster reads it, not parsed twice), inside
# the function that needs it, so the service itself never loads the platform.
CROSSING = {("cdc_subscriber/cli.py", "cdc_entities", "replication.config")}


def crossing_imports(folder: str, other: str) -> set[tuple[str, str, str]]:
    """(file, enclosing function or "", module) of every import in `folder` of the package `other`."""
    found = set()
    for path in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        owner = {
            id(inner): node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(node)
        }
        found |= {
            (str(path.relative_to(REPO)), owner.get(id(node), ""), module)
            for node, module in project_imports(tree)
            if module.split(".")[0] == other
        }
    return found


def test_the_subscriber_and_the_platform_share_only_what_shared_holds():
    """Neither the platform (replication/, cdc_assets/) nor cdc_subscriber/ imports the other (what both need is in
    shared/), but for CROSSING."""
    assert crossing_imports("cdc_assets", "cdc_subscriber") == set()
    assert crossing_imports("replication", "cdc_subscriber") == set()
    assert crossing_imports("cdc_subscriber", "cdc_assets") == set()
    assert crossing_imports("cdc_subscriber", "replication") == CROSSING
    # shared/ is what they share: both of them import it.
    assert {"shared"} <= set().union(*imported_packages("cdc_subscriber").values())
    assert {"shared"} <= set().union(*imported_packages("cdc_assets").values())


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
        "replication",
        "cdc_assets",
        "resources",
        "sensors",
        "spark_ops",
        "object_schema",
        "cdc_subscriber",
        "shared",
    }


def test_the_names_module_imports_nothing_of_the_project():
    tree = ast.parse((REPO / "cdc_assets" / "names.py").read_text())
    assert [module for _, module in project_imports(tree)] == []


def test_no_import_inside_the_platform_points_up_a_layer():
    modules = layered_modules()
    upward = sorted(
        f"{name} ({layer}) imports {target} ({modules[target][0]})"
        for name, (layer, tree) in modules.items()
        for _, imported in project_imports(tree)
        for target in [imported if imported in modules else imported.rsplit(".", 1)[0]]
        if target in modules and modules[target][0] > layer
    )
    assert upward == []


def test_the_layers_hold_what_the_layout_page_says():
    layers = {name: layer for name, (layer, _) in layered_modules().items()}
    assert {n for n, layer in layers.items() if layer == DEFINITIONS} >= {
        "cdc_assets.assets",
        "cdc_assets.checks",
        "cdc_assets.history.assets",
        "cdc_assets.operate.jobs",
        "cdc_assets.upkeep.jobs",
    }
    assert layers["replication.apply"] == layers["replication.ingest"] == STEPS
    assert layers["replication.config"] == layers["replication.state"] == BASE
    # The engine declares nothing Dagster loads; every definition is in cdc_assets/.
    assert {n for n, layer in layers.items() if layer == DEFINITIONS and n.startswith("replication")} == set()


def test_no_module_of_the_product_imports_the_project_inside_a_function():
    """An import inside a function hides a cycle; the subscriber's command line is the exception, loading the
    platform's config and Salesforce client only for the commands that need them."""
    hidden = sorted(
        f"{path.relative_to(REPO)}:{node.lineno} imports {module}"
        for folder in ("replication", "cdc_assets", "resources", "sensors", "spark_ops", "object_schema", "shared")
        for path in sorted((REPO / folder).rglob("*.py"))
        for tree in [ast.parse(path.read_text())]
        for inside in [in_functions(tree)]
        for node, module in project_imports(tree)
        if id(node) in inside
    )
    assert hidden == []


# Sorting or comparing by commit order: a sort call, or a SQL struct compared with `<`/`>` (the guard's form).
SORTS = re.compile(r"sort_indices|sort_by|\.sort\(|key=lambda|ORDER BY|min_by|max_by", re.IGNORECASE)
STRUCT_COMPARED = re.compile(
    r"named_struct\([^()]*sequence_number[^()]*\)\s*[<>]|[<>]=?\s*named_struct\([^()]*sequence_number"
)
ORDER_HOME = "spark_ops/order.py"


def test_commit_order_is_written_only_in_spark_ops_order():
    """Commit order (docs/design/contract.md §4) is declared once, in spark_ops/order.py, in the forms Spark and
    Arrow compare it in; every other module sorts or compares changes through it. A function elsewhere that sorts
    by the sequence number, or SQL comparing a position struct, spells the order out again (and may drift)."""
    spelled = sorted(
        f"{path.relative_to(REPO)}:{node.lineno}"
        for folder in ("replication", "cdc_assets", "resources", "sensors", "spark_ops", "object_schema")
        for path in sorted((REPO / folder).rglob("*.py"))
        if str(path.relative_to(REPO)) != ORDER_HOME
        for source in [path.read_text()]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Assign)
        for text in [ast.get_source_segment(source, node) or ""]
        if (SORTS.search(text) and "sequence_number" in text) or STRUCT_COMPARED.search(text)
    )
    assert spelled == []


def test_the_layout_page_pictures_every_folder_of_the_repository():
    """docs/development/layout.md opens with a picture of the repository: a line per folder, each of them there."""
    picture = (REPO / "docs" / "development" / "layout.md").read_text().split("```")[1]
    pictured = set(re.findall(r"^(\w+)/", picture, flags=re.M))
    # What .gitignore keeps out of the repository: build output, caches, a local run's folders.
    ignored = {"site", "changefeed", "spark-warehouse", "metastore_db", "__pycache__"}
    folders = {
        p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info")
    }
    assert pictured == folders - ignored
