"""The README stays what a first visitor needs, and the documentation site says what the code does.

The generated parts of the site (docs/generate.py: the options, the Dagster definitions, the commands' help) are
written from the code on every build, so they cannot drift; what is written by hand is checked against the code
here: the runbook has an entry for every asset check the definitions make, and the table layout names every column
the platform writes. `make docs` (`mkdocs build --strict`, in CI) checks the links and anchors.
"""

from __future__ import annotations

import ast
import re

import pytest
from docs_pages import DOCS, generator, pages, section
from settings import REPO

from cdc_assets.checks import QUARANTINE_EMPTY
from object_schema.describe import FORMULAS_AT, SYSTEM_COLUMNS
from replication.history.chain import HISTORY_COLUMNS
from resources.landing_zone import QUARANTINE_SCHEMA
from spark_ops.parse import CHANGE_COLUMNS

README_LINES = 150
COMMANDS_WITHIN = 40


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES
    top = "\n".join(lines[:COMMANDS_WITHIN])
    assert re.search(r"^make run\b", top, re.M) and re.search(r"^make test\b", top, re.M)
    assert "docs/screenshots/asset_graph.png" in top  # the picture


def test_every_relative_link_of_the_readme_and_the_pages_resolves():
    """mkdocs checks the site's own links; the README is not a page of it, and GitHub shows both."""
    broken = []
    for page in pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


@pytest.fixture(scope="module")
def definitions() -> str:
    return generator().dagster_definitions()


def test_the_generated_definitions_name_every_kind(definitions: str):
    for title in ("## Assets", "## Asset checks", "## Sensors", "## Jobs", "## Schedules"):
        assert title in definitions
    for name in ("`salesforce/<Object>`", "`landing_zone_sensor`", "`resync_objects`", "`poll_sensor`"):
        assert name in definitions
    assert "| `salesforce/<Object>: poll_overlap` | no |" in definitions and "`source: poll` objects |" in definitions


def test_the_runbook_has_an_entry_for_every_check(definitions: str):
    checks = set(re.findall(r"^\| `[^`]+: (\w+)` \|", definitions, re.M))
    assert QUARANTINE_EMPTY in checks and len(checks) >= 12
    runbook = (DOCS / "operations" / "runbook.md").read_text()
    missing = [c for c in sorted(checks) if f"### `{c}`" not in runbook]
    assert missing == [], "a check without a runbook entry: say what it means and what to do"


def test_the_table_layout_names_every_column_the_platform_writes():
    layout = (DOCS / "reference" / "tables.md").read_text()
    columns = [
        *(name for name, _ in SYSTEM_COLUMNS),
        FORMULAS_AT,
        *(f.name for f in HISTORY_COLUMNS),
        *CHANGE_COLUMNS,
        "_ingest_seq",
        "_ingested_at",
        *QUARANTINE_SCHEMA.names,
        "run_id",
        "quarantined_at",
    ]
    assert [c for c in columns if f"`{c}`" not in layout] == []


def test_every_marker_of_the_pages_is_written_from_the_code():
    """Each generated part expands (a help marker naming a command that is gone fails here, and in `make docs`)."""
    marked = [p for p in sorted(DOCS.rglob("*.md")) if generator().MARKER.search(p.read_text())]
    assert {p.name for p in marked} >= {"replication-yaml.md", "dagster.md", "cli.md"}
    for page in marked:
        text = generator().expand(page.read_text())
        assert not generator().MARKER.search(text)
    assert "usage: python -m cdc_subscriber status" in generator().expand(
        "<!-- generated: help cdc_subscriber status -->"
    )


def test_the_examples_tests_execute_are_where_the_site_says():
    """The sections the example tests read exist once, with their examples."""
    assert "```python" in section("Reading the replicas") and "```python" in section("History tables")
    assert "```yaml" in section("replication.yaml")


def workload_modules() -> dict[str, str]:
    """`python -m bench <workload>`: each workload's module (bench/__main__.py `WORKLOADS`, naming its `run`)."""
    (workloads,) = [
        node.value
        for node in ast.parse((REPO / "bench" / "__main__.py").read_text()).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["WORKLOADS"]
    ]
    return {
        key.value: module.value.id
        for key, value in zip(workloads.keys, workloads.values, strict=True)
        for module in ast.walk(value)
        if isinstance(module, ast.Attribute) and module.attr == "run" and isinstance(module.value, ast.Name)
    }


def test_the_benchmark_results_open_with_the_current_figure_of_every_benchmark():
    """bench/RESULTS.md opens, before its first sitting, with one table naming every benchmark by its command: the
    modules run as `python -m bench.<module>` and the workloads of `python -m bench <workload>`."""
    text = (REPO / "bench" / "RESULTS.md").read_text()
    assert re.findall(r"^## (.+)$", text, flags=re.M)[0] == "Current figures"
    table = text.split("\n## Current figures\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and not line.startswith("|-")]
    header, *rows = rows
    commands = [row[header.index("command")] for row in rows]
    workloads = workload_modules()
    named = {m for c in commands for m in re.findall(r"\bbench\.(\w+)", c)} | {
        workloads[w] for c in commands for w in re.findall(r"python -m bench ([\w-]+)", c)
    }
    bench = REPO / "bench"
    runnable = {
        p.stem for p in bench.glob("*.py") if p.stem != "__main__" and '__name__ == "__main__"' in p.read_text()
    }
    assert named == runnable | set(workloads.values())
