"""Screenshots of the UI's operator actions (README "Operating from the UI", "Table upkeep"), in headless Chromium.

The launchpad of each action's job, as a person opens it (Jobs, the job, Launchpad): `resync_objects` and
`pause_replication` (config `objects`), `acknowledge_quarantine`; and the plots of change_events'
upkeep observations after two upkeep runs launched through GraphQL. Each page is read back: the job's name and
its config keys must be on it.
"""

from __future__ import annotations

import time

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient
from test_ui import goto, materialized, page, shoot, words  # noqa: F401 (fixtures)

# On SQLite only: the same session stack as the daemon tests' SQLite run (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("storage", ["sqlite"], indirect=True, scope="session")]

LOCATION = "salesforce_cdc"


def launchpad(page, stack, job: str) -> None:
    goto(page, f"{stack.ui_url}/locations/{LOCATION}/jobs/{job}/playground")
    page.get_by_text(job).first.wait_for()
    page.wait_for_timeout(1500)  # the config editor fills in


@pytest.mark.parametrize(
    "job, expected",
    [("resync_objects", {"objects"}), ("pause_replication", {"objects"}), ("acknowledge_quarantine", {"until"})],
)
def test_each_operator_action_is_a_job_launched_from_the_launchpad(page, materialized, job, expected):
    launchpad(page, materialized, job)
    shoot(page, f"launchpad_{job}.png")
    text = page.locator("body").inner_text()
    assert job in text and all(e in text for e in expected), text[:2000]


def test_upkeep_observations_plot_on_the_change_events_asset(page, materialized):
    host, port = materialized.ui_url.removeprefix("http://").split(":")
    client = DagsterGraphQLClient(host, port_number=int(port))
    for _ in range(2):
        run = client.submit_job_execution("upkeep_change_events")
        while client.get_run_status(run) not in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE):
            time.sleep(2)
        assert client.get_run_status(run) == dg.DagsterRunStatus.SUCCESS
    goto(page, f"{materialized.ui_url}/assets/change_events?view=overview")
    page.get_by_role("button", name="Plots").click()
    page.get_by_text("files_after", exact=True).first.wait_for()
    page.wait_for_timeout(1000)
    shoot(page, "upkeep_change_events_plots.png")
    assert {"files_before", "files_after", "bytes_before", "bytes_after"} <= words(page)
