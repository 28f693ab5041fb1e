"""The Dagster UI in a real browser: what an operator sees once the sensors have done their work.

Headless Chromium (Debian's `chromium`, `make browser`) driven by Playwright loads the webserver of the session's
stack and photographs three pages into docs/screenshots/: the global asset lineage, the checks of one replica and
the plots of its materialization metadata over time. Each page is read back from the DOM: the asset names, the six
check names and a plot per event count must be on it, so a renamed asset or check, a code location that failed to
load or a materialization without its counts fails the test.

Runs after test_daemon (file order) so the plots have a history; run alone it lands a small workload first.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cdc_assets.apply import EVENT_COUNTS
from cdc_assets.checks import CHECKS, SCHEMA, UNIQUE_ID
from demo import processes

pytestmark = pytest.mark.e2e

SCREENSHOTS = processes.REPO / "docs" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
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
        stack.wait_settled(timeout_seconds=300)
    stack.wait_settled(timeout_seconds=300)
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
    page.get_by_text("salesforce", exact=True).first.wait_for()
    page.keyboard.press("Alt+e")  # "Expand all groups": the groups start collapsed to one box each
    for name in materialized.objects:
        page.get_by_text(name, exact=True).first.wait_for()
    page.get_by_text("fetching statuses").first.wait_for(state="detached")
    page.get_by_text("Loading...").first.wait_for(state="detached")  # each node's latest event and check results
    shoot(page, "asset_graph.png")

    assert page.get_by_text("Global asset lineage").count() == 1
    assert {"landing_zone", "change_events", "changefeed", *materialized.objects} <= words(page)
    # Zoomed out to three groups (cdc, salesforce, changefeed), nodes drop their check summaries; the checks are
    # read on a replica's checks tab (test_replica_checks_tab_lists_every_check).


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
