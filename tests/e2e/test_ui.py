"""The Dagster UI in a real browser: what an operator sees once the sensors have done their work.

Headless Chromium (Debian's `chromium`, `make browser`) driven by Playwright loads the webserver of the session's
stack and photographs four pages into docs/screenshots/: the global asset lineage, the checks of one replica, the
plots of its materialization metadata over time, and the runs list. Each page is read back from the DOM: the asset
names (each asset's its own, as Dagster shows it), the six check names and a plot per event count must be on it, so
a renamed asset or check, a code location that failed to load or a materialization without its counts fails the test.

Then what the UI says is checked where it reads it, Dagster's GraphQL API (README "Dagster conventions"): each
replica's node shows its latest checks completed (schema and unique_id passed), no replica at rest is unsynced,
each has its freshness policy, the runs carry only the tags a person filters by, the whole graph is one asset group
(so the lineage opens expanded), and the automation condition sensor that exports the changefeeds is running.

Runs after test_daemon (file order) so the plots have a history; run alone it lands a small workload first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.checks import CHECKS, SCHEMA, UNIQUE_ID
from cdc_assets.names import GROUP, VISIBLE, events_key, replica_key
from demo import processes
from replication.apply import EVENT_COUNTS
from sensors.changefeed import SENSOR_NAME as AUTOMATION_SENSOR

# On SQLite only: the same session stack as the daemon tests' SQLite run (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("storage", ["sqlite"], indirect=True, scope="session")]

SCREENSHOTS = processes.REPO / "docs" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1600, "height": 1200}
REPLICA = "Account"
PAGE_TIMEOUT_MS = 60_000
MATERIALIZATIONS_WANTED = 2  # a plot over time needs more than one point


@pytest.fixture(scope="module")
def materialized(stack):
    """The stack at rest with every replica materialized at least twice (test_daemon normally did this already):
    no check is still in progress on the pages photographed."""
    with stack.instance() as instance:
        counts = [len(stack.materializations(instance, name)) for name in stack.objects]
    for _ in range(MATERIALIZATIONS_WANTED - min(counts)):
        stack.workload.run(changes=200)
        stack.emu.flush_cdc()
        stack.wait_settled(timeout_seconds=900)
    stack.wait_settled(timeout_seconds=900)
    return stack


@pytest.fixture(scope="module")
def page(materialized):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the e2e extra: pip install -e '.[e2e]'")
    assert CHROMIUM.exists(), f"{CHROMIUM} missing: run `make browser` (as root) to install Debian's chromium"
    # The instance (the shipped dagster.yaml) turns off the community dialog a fresh webserver would open over the
    # first page: nothing here clicks it away, so a screenshot shows what a new user sees.
    assert processes.graphql(materialized.ui_url, "{ shouldShowNux }")["shouldShowNux"] is False
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def words(page) -> set[str]:
    return set(page.locator("body").inner_text().split())


def check_statuses(page) -> dict[str, str]:
    """Check name -> status label ("Succeeded", "Failed", "In progress", ...) as the checks tab lists them: each entry
    reads name, name (its tooltip target) and status, one per line."""
    lines = [line.strip() for line in page.locator("body").inner_text().splitlines() if line.strip()]
    return {a: c for a, b, c in zip(lines, lines[1:], lines[2:]) if a == b and a in CHECKS}


def shown(name: str, on_page: set[str]) -> bool:
    """`name` is on the page whole, or as Dagster draws a long name on a small node: its middle cut out ("…")."""
    return name in on_page or any(
        "…" in w and name.startswith(w.split("…")[0]) and name.endswith(w.split("…")[-1]) for w in on_page
    )


def shoot(page, name: str) -> Path:
    path = SCREENSHOTS / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000, f"{path} is nearly empty"
    return path


def goto(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")


def test_asset_graph_shows_the_landing_zone_feeding_every_replica(page, materialized):
    goto(page, f"{materialized.ui_url}/asset-groups")
    # One asset group: the lineage opens as the graph itself, no group box to expand (nothing is clicked).
    for name in materialized.objects:
        page.get_by_text(name, exact=True).first.wait_for()
    page.get_by_text("fetching statuses").first.wait_for(state="detached")
    page.get_by_text("Loading...").first.wait_for(state="detached")  # each node's latest event and check results
    shoot(page, "asset_graph.png")

    assert page.get_by_text("Global asset lineage").count() == 1
    # Nothing marked unsynced at rest: neither the "Unsynced" tag of a node drawn in full nor the yellow dot of one
    # drawn small (Dagster's Stale.module.css class), whichever the zoom the lineage opens at.
    assert page.locator("[class*='StaleDot']").count() == 0 and "Unsynced" not in page.locator("body").inner_text()
    assert {"landing_zone", "change_events", *materialized.objects} <= words(page)
    # Dagster names a node by its key's last part (ui-core asset-graph/AssetNode.tsx): every asset's must be its
    # own, so the events slice, the replica and the changefeed of Account are told apart without opening them.
    displayed = [n["assetKey"]["path"][-1] for n in processes.graphql(materialized.ui_url, ALL_NODES)["assetNodes"]]
    assert len(displayed) == len(set(displayed)), f"assets shown under one name: {sorted(displayed)}"
    on_page = words(page)
    assert [name for name in displayed if not shown(name, on_page)] == []


def test_replica_checks_tab_lists_every_check(page, materialized):
    goto(page, f"{materialized.ui_url}/assets/salesforce/{REPLICA}?view=checks")
    page.get_by_text(f"Checks ({len(CHECKS)})", exact=True).wait_for()
    for check in CHECKS:
        page.get_by_text(check, exact=True).first.wait_for()
    shoot(page, "replica_checks.png")

    assert page.get_by_role("tab", name="Checks", selected=True).count() == 1
    statuses = check_statuses(page)
    assert set(statuses) == set(CHECKS), statuses
    assert all(statuses[name] in ("Succeeded", "Failed") for name in CHECKS), f"every check evaluated: {statuses}"
    assert statuses[SCHEMA] == statuses[UNIQUE_ID] == "Succeeded", statuses


def test_replica_metadata_plots_show_every_event_count(page, materialized):
    goto(page, f"{materialized.ui_url}/assets/salesforce/{REPLICA}?view=overview")
    page.get_by_role("button", name="Plots").click()
    for key in EVENT_COUNTS:
        page.get_by_text(key, exact=True).first.wait_for()
    page.get_by_text("Metadata", exact=True).evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1000)  # the charts animate in
    shoot(page, "replica_plots.png")

    titles = words(page)
    assert set(EVENT_COUNTS) <= titles, f"no plot for {set(EVENT_COUNTS) - titles}"
    assert page.locator("canvas").count() >= len(EVENT_COUNTS)


def test_runs_list_shows_each_run_with_its_few_tags(page, materialized):
    goto(page, f"{materialized.ui_url}/runs")
    page.get_by_text("cdc/mode").first.wait_for()
    shoot(page, "runs_list.png")

    text = page.locator("body").inner_text()
    assert "cdc/reason" in text and "cdc/objects" in text
    assert ".dagster/" not in text and "cdc.cut" not in text and '"through"' not in text  # no JSON cut, no hidden


# -- what the UI says, through its GraphQL API ------------------------------------------------------------------------

NODES = """
query Replicas($keys: [AssetKeyInput!]!) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    groupName
    staleStatus
    staleCauses { reason }
    internalFreshnessPolicy { ... on TimeWindowFreshnessPolicy { failWindowSeconds } }
    assetChecksOrError { ... on AssetChecks { checks { name executionForLatestMaterialization { status } } } }
  }
}"""
ALL_NODES = """
query Assets { assetNodes { assetKey { path } } }"""
RUNS = """
query Runs { runsOrError(limit: 100) { ... on Runs { results { runId tags { key value } } } } }"""
SENSORS = """
query Sensors {
  workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { ... on RepositoryLocation {
    repositories { sensors { name sensorState { status } } } } } } } }
}"""
MAX_TAGS = 8  # the three of cdc_assets/names.py and Dagster's own (dagster/sensor_name, dagster/run_key, ...)


def replica_nodes(stack, key=replica_key) -> dict[str, dict]:
    keys = [{"path": list(key(n).path)} for n in stack.objects]
    nodes = processes.graphql(stack.ui_url, NODES, {"keys": keys})["assetNodes"]
    return {n["assetKey"]["path"][-1]: n for n in nodes}


def test_graphql_each_replica_node_shows_its_latest_checks_completed_and_passed(materialized):
    for name, node in replica_nodes(materialized).items():
        checks = {
            c["name"]: (c["executionForLatestMaterialization"] or {}).get("status")
            for c in node["assetChecksOrError"]["checks"]
        }
        assert set(checks) >= set(CHECKS), name
        assert all(checks[c] in ("SUCCEEDED", "FAILED") for c in CHECKS), f"{name}: not completed: {checks}"
        assert checks[SCHEMA] == checks[UNIQUE_ID] == "SUCCEEDED", f"{name}: {checks}"


def test_graphql_no_replica_at_rest_is_unsynced_and_each_has_its_freshness_policy(materialized):
    materialized.wait_settled(timeout_seconds=900)
    for name, node in replica_nodes(materialized).items():
        assert node["staleStatus"] == "FRESH", f"{name} unsynced: {node['staleCauses']}"
        assert node["internalFreshnessPolicy"]["failWindowSeconds"] > 0, name
        assert node["groupName"] == GROUP  # one group: the global lineage opens expanded
    for name, node in replica_nodes(materialized, events_key).items():  # nor is the slice of events it applies
        assert node["staleStatus"] == "FRESH", f"events/{name} unsynced: {node['staleCauses']}"


def test_graphql_runs_carry_only_the_tags_a_person_filters_by(materialized):
    runs = processes.graphql(materialized.ui_url, RUNS)["runsOrError"]["results"]
    ours = [r for r in runs if any(t["key"].startswith("cdc/") for t in r["tags"])]
    assert ours, "the sensors should have started runs"
    for run in ours:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        assert {k for k in tags if not k.startswith("dagster/")} <= set(VISIBLE), tags
        assert len(tags) <= MAX_TAGS and all(len(v) <= 200 for v in tags.values()), tags


def test_graphql_the_automation_condition_sensor_runs(materialized):
    entries = processes.graphql(materialized.ui_url, SENSORS)["workspaceOrError"]["locationEntries"]
    sensors = {
        s["name"]: s["sensorState"]["status"]
        for e in entries
        for r in e["locationOrLoadError"]["repositories"]
        for s in r["sensors"]
    }
    assert sensors[AUTOMATION_SENSOR] == "RUNNING", sensors
