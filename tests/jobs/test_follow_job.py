"""`follow_job` (what `fl-job submit` and the tests follow a job with) returns a refused job with FLARE's reason.

FLARE's job runner marks a job it could not start FINISHED:FAILED_TO_RUN and writes each site's deploy answer into
the meta in a second update; a follower reading between the two got the status alone (seen under the suite's load:
'status: FINISHED:FAILED_TO_RUN', the site's refusal missing). The server's timing cannot be forced on a live
federation (tests/federation/test_site_control.py checks refusals there), so the job store here answers FLARE's own
`Session.get_job_meta` with the two writes' states in order.
"""

from __future__ import annotations

from typing import Any

from nvflare.fuel.flare_api.api_spec import JobNotFound
from nvflare.fuel.flare_api.flare_api import Session
from nvflare.fuel.hci.client.api import ResultKey
from nvflare.fuel.hci.proto import MetaKey

from federation_tools.admin import follow_job

JOB = "4c1f5e2a-0b7d-4c55-9a3e-2f6d1e8b9c01"
REFUSED = ["server: OK", "site-1: this site requires client-side DP on the weights it sends"]


class JobStore(Session):
    """FLARE's admin session over a job store that answers `get_job_meta` with `metas` in turn, then the last."""

    def __init__(self, metas: list[dict[str, Any]]):  # no server: the store is the list
        self.metas = metas
        self.reads = 0

    def _do_command(self, command: str, enforce_meta: bool = True, props: Any = None) -> dict[str, Any]:
        if not command.startswith("get_job_meta") or not command.endswith(JOB):
            raise JobNotFound(command)
        meta = self.metas[min(self.reads, len(self.metas) - 1)]
        self.reads += 1
        return {ResultKey.META: {MetaKey.JOB_META: meta}}


def test_a_refusal_read_between_flares_two_writes_still_names_the_site():
    running, failed = {"status": "RUNNING"}, {"status": "FINISHED:FAILED_TO_RUN"}
    store = JobStore([running, failed, failed, {**failed, "job_deploy_detail": REFUSED}])

    outcome = follow_job(store, JOB, timeout=60, download=False, progress=None)

    assert outcome.status == "FINISHED:FAILED_TO_RUN" and not outcome.completed
    assert "site-1: this site requires client-side DP" in outcome.refusal()
    assert store.reads == 4


def test_a_job_that_never_gets_a_deploy_detail_is_returned_after_the_wait():
    store = JobStore([{"status": "FINISHED:FAILED_TO_RUN"}])

    outcome = follow_job(store, JOB, timeout=60, download=False, progress=None)

    assert outcome.refusal() == "status: FINISHED:FAILED_TO_RUN"
    assert store.reads > 1  # it read the job again, waiting for the detail, before it gave up


def test_other_finished_jobs_are_read_once():
    store = JobStore([{"status": "FINISHED:ABNORMAL", "failed_clients": ["site-2"]}])

    outcome = follow_job(store, JOB, timeout=60, download=False, progress=None)

    assert "failed_clients: ['site-2']" in outcome.refusal() and store.reads == 1
