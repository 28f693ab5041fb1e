"""A poll's Bulk API 2.0 job outlives a run that fails (not only one that is killed): the next run resumes it from
the locator the failed run committed, and deletes it once read to its end."""

from __future__ import annotations

from org_compare import differences
from poll_harness import OPTIONS, poll_platform, poll_state, run_replicas, update

from salesforce_emulator.workload import Workload


def test_a_poll_run_that_fails_between_bulk_pages_keeps_the_job_and_the_next_run_resumes_it(tmp_path, org, monkeypatch):
    Workload(org, seed=8).build_org(accounts=40)
    platform = poll_platform(tmp_path, org, objects=["Contact"], hard_delete_check_every=86400)
    run_replicas(platform, ["Contact"])
    for record_id in org.store.ids("Contact")[:100]:
        update(org, "Contact", record_id, Title=f"T-{record_id[-4:]}")

    monkeypatch.setenv("CDC_FAULT_POINT", "poll.after_page_commit")  # raises: the run fails, the process lives on
    failed = run_replicas(platform, ["Contact"], raise_on_error=False)
    assert not failed.success
    job = poll_state(platform, "Contact").job
    assert job.locator and job.records == OPTIONS["poll_page_size"]
    assert list(org.api.jobs) == [job.id]  # kept in the org

    monkeypatch.delenv("CDC_FAULT_POINT")
    org.reset_request_counts()
    resumed = run_replicas(platform, ["Contact"])
    meta = platform.materialization(resumed, "Contact")
    assert meta["poll_resumed"] == 1 and meta["poll_bulk"] == 1
    # No new job: the poll read the failed run's job from its locator, and no Id comparison is due (the initial
    # load's snapshot was one).
    assert org.request_counts().get("bulk_query_job", 0) == 0
    assert poll_state(platform, "Contact").job is None
    assert list(org.api.jobs) == []  # read to its end: deleted
    assert differences(org, "Contact", platform.rows("Contact")) == []
