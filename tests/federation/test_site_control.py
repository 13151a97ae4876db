"""The hospital stays in control, on a real provisioned federation: no remote reading of a site whatever the admin's
role, the site's privacy policy refuses weak jobs and jobs over its budget before they start, and the site keeps
a privacy ledger and an audit log of what it ran and sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from support import ADMIN, SUPER_ADMIN

from jobs.admin import submit_and_wait
from jobs.common import build_job, export
from jobs.fedkt_csd.spec import KIND as FEDKT_CSD
from jobs.fedkt_csd.spec import FedKTCSDParams
from jobs.segmentation.spec import CPU_DEMO, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from site_agent.audit import AuditLog
from site_agent.ledger import Ledger
from site_agent.policy import load_policy, write_policy

pytestmark = pytest.mark.federation


@contextmanager
def site_policy(running_federation, site: str, **changes) -> Iterator[None]:
    """The site's IT edits its policy for one test; the guard reads it for the next job, no restart."""
    local = running_federation.federation.kit(site) / "local"
    before = load_policy(local)
    write_policy(local, replace(before, **changes))
    try:
        yield
    finally:
        write_policy(local, before)


def _submit(running_federation, job_dir: Path, admin: str = ADMIN, download: bool = False):
    session = running_federation.session(admin)
    try:
        return submit_and_wait(session, job_dir, timeout=300, download=download, progress=None)
    finally:
        session.close()


@pytest.mark.parametrize("admin", [ADMIN, SUPER_ADMIN])
def test_no_admin_role_can_list_or_read_files_at_a_site(running_federation, admin):
    session = running_federation.session(admin)
    try:
        answers = [session.ls_target("site-1", "-la"), session.cat_target("site-1", file="local/site_agent.json"),
                   session.tail_target_log("site-1"), session.head_target("site-1", file="local/site_policy.json"),
                   session.grep_target("site-1", pattern="data", file="local/site_agent.json"),
                   session.get_working_directory("site-1")]
    finally:
        session.close()

    for answer in answers:
        assert "does not allow remote shell commands" in answer and "linear" not in answer
    role = "project_admin" if admin == ADMIN else "super"
    refused = [e for e in AuditLog(running_federation.federation.kit("site-1") / "local").entries()
               if e["event"] == "command_refused" and e["user"] == admin]
    assert {e["command"] for e in refused} >= {"ls", "cat", "tail", "head", "grep", "pwd"}
    assert {e["role"] for e in refused} == {role}


def test_a_site_that_opts_in_lets_the_named_role_read(running_federation):
    with site_policy(running_federation, "site-2", shell_command_roles=("project_admin",)):
        session = running_federation.session(ADMIN)
        try:
            allowed = session.cat_target("site-2", file="local/site_policy.json")
        finally:
            session.close()

    assert '"shell_command_roles"' in allowed


def test_a_real_job_runs_downloads_and_leaves_ledger_and_audit_entries(running_federation, fedavg_job_dir):
    outcome = _submit(running_federation, fedavg_job_dir, download=True)
    session = running_federation.session()
    try:
        listed = {j["job_id"]: j["status"] for j in session.list_jobs()}
    finally:
        session.close()

    assert outcome.completed, outcome.refusal()
    assert listed[outcome.job_id] == "FINISHED:COMPLETED"
    assert (outcome.server_app_dir() / "results.json").is_file()
    local = running_federation.federation.kit("site-3") / "local"
    [charged] = [e for e in Ledger(local).entries() if e["job_id"] == outcome.job_id]
    assert charged["job_kind"] == "fedavg-linear" and charged["epsilon"] is None and charged["submitter"] == ADMIN
    events = AuditLog(local).entries(outcome.job_id)
    names = [e["event"] for e in events]
    assert names[:3] == ["job_seen", "job_accepted", "job_started"] and names[-1] == "job_end"
    assert events[0]["submitter_role"] == "project_admin" and events[0]["job_kind"] == "fedavg-linear"
    assert events[0]["job_agent_version"] == events[0]["agent_version"]
    sent = [e for e in events if e["event"] == "result_sent"]
    assert len(sent) == 5 and all(e["payload_bytes"] > 0 and len(e["payload_sha256"]) == 64 for e in sent)


def test_a_job_below_the_sites_dp_floor_is_refused_before_it_starts(running_federation, fedavg_job_dir, tmp_path):
    weak_dp = export(build_job(SEGMENTATION, SegmentationParams(num_rounds=1, min_clients=3, dp_clip_norm=1.0,
                                                                dp_noise_multiplier=0.5, **CPU_DEMO)), tmp_path)
    with site_policy(running_federation, "site-1", min_dp_noise_multiplier=1.0):
        no_dp, weak = _submit(running_federation, fedavg_job_dir), _submit(running_federation, weak_dp)

    for outcome, noise in ((no_dp, 0.0), (weak, 0.5)):
        assert not outcome.completed
        assert "requires client-side DP on the weights it sends" in outcome.refusal()
        assert f"dp_noise_multiplier={noise}" in outcome.refusal()
        events = AuditLog(running_federation.federation.kit("site-1") / "local").entries(outcome.job_id)
        assert [e["event"] for e in events] == ["job_seen", "job_refused"]
        assert not [e for e in Ledger(running_federation.federation.kit("site-1") / "local").entries()
                    if e["job_id"] == outcome.job_id]


def test_a_job_over_the_sites_budget_is_refused_before_it_starts(running_federation, tmp_path):
    release = export(build_job(FEDKT_CSD, FedKTCSDParams(epsilon=8.0)), tmp_path)
    spent = Ledger(running_federation.federation.kit("site-2") / "local").totals().epsilon
    with site_policy(running_federation, "site-2", budget_epsilon=spent + 5.0):
        outcome = _submit(running_federation, release)

    assert not outcome.completed
    reason = outcome.refusal()
    assert "would spend epsilon 8" in reason and f"budget epsilon {spent + 5.0}" in reason
    for site in running_federation.federation.sites:  # a job that never started is charged nowhere
        assert not [e for e in Ledger(running_federation.federation.kit(site) / "local").entries()
                    if e["job_id"] == outcome.job_id]


def test_a_meta_that_claims_more_dp_than_the_job_has_is_stopped_at_start(running_federation, tmp_path):
    job_dir = export(build_job(SEGMENTATION, SegmentationParams(num_rounds=1, min_clients=3, dp_clip_norm=1.0,
                                                                dp_noise_multiplier=2.0, **CPU_DEMO)), tmp_path)
    config_path = job_dir / "app" / "config" / "config_fed_client.json"
    config = json.loads(config_path.read_text())
    config["executors"][0]["executor"]["args"]["dp_noise_multiplier"] = 0.0
    config_path.write_text(json.dumps(config))

    outcome = _submit(running_federation, job_dir)

    assert not outcome.completed
    [refused] = [e for e in AuditLog(running_federation.federation.kit("site-1") / "local").entries(outcome.job_id)
                 if e["event"] == "job_refused_at_start"]
    assert "dp_noise_multiplier=0.0 (declared 2.0)" in refused["reason"]
    assert not [e for e in AuditLog(running_federation.federation.kit("site-1") / "local").entries(outcome.job_id)
                if e["event"] == "result_sent"]
