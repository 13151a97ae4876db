"""The hospital stays in control, on a real provisioned federation: no code of a job runs at a site and no remote
reading or configuring of a site whatever the admin's role, tampered jobs are refused at deploy naming what, the
site's privacy policy refuses weak jobs and jobs over its budget before they start, and the site keeps a privacy
ledger and an audit log of what it ran and sent."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from support import ADMIN, SUPER_ADMIN

from federation_tools.admin import submit_and_wait
from jobs.common import build_job, export
from jobs.fedavg_linear.spec import KIND as FEDAVG_LINEAR
from jobs.fedavg_linear.spec import FedAvgLinearParams
from jobs.fedkt_csd.spec import KIND as FEDKT_CSD
from jobs.fedkt_csd.spec import FedKTCSDParams
from jobs.segmentation.spec import CPU_DEMO, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from site_agent.privacy.audit import AuditLog
from site_agent.privacy.ledger import Ledger
from site_agent.privacy.policy import load_policy, write_policy

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


def _refused_at_deploy(running_federation, outcome, *reasons: str) -> None:
    """Every site refused the job at deploy, the admin sees each reason, and nothing of the job ran at a site."""
    assert not outcome.completed
    refusal = outcome.refusal()
    for site in running_federation.federation.sites:
        kit = running_federation.federation.kit(site)
        assert f"{site}: NVFLARE_ERROR: refused at deploy: " in refusal and str(kit) not in refusal, refusal
        events = AuditLog(kit / "local").entries(outcome.job_id)
        assert [e["event"] for e in events] == ["job_seen", "job_refused"], events
        assert all(reason in events[-1]["reason"] for reason in reasons), events[-1]
        assert not (kit / outcome.job_id).exists()  # nothing of the job was written at the site
    assert all(reason in refusal for reason in reasons) and "aborted" not in refusal, refusal


def _edit_site_config(job_dir: Path, edit) -> None:
    path = job_dir / "app" / "config" / "config_fed_client.json"
    config = json.loads(path.read_text())
    edit(config, config["executors"][0]["executor"]["args"]["params"])
    path.write_text(json.dumps(config))


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


SITE_READERS = ["sys_info client site-1", "report_env site-1", "report_resources client site-1",
                "report_version client site-1", "show_scopes client site-1", "configure_site_log client site-1 DEBUG",
                "check_status client site-1"]


@pytest.mark.parametrize("admin", [ADMIN, SUPER_ADMIN])
def test_admin_commands_that_read_or_change_a_site_are_refused_and_audited(running_federation, admin):
    local = running_federation.federation.kit("site-1") / "local"
    since = len(AuditLog(local).entries())
    session = running_federation.session(admin)
    try:
        answers = {command.split()[0]: json.dumps(session.do_command(command)) for command in SITE_READERS}
    finally:
        session.close()

    role = "project_admin" if admin == ADMIN else "super"
    opted_in = {"check_status"} if admin == ADMIN else set()  # the provisioned policy's operator commands
    for command, answer in answers.items():
        assert str(running_federation.federation.kit("site-1")) not in answer and "free_memory" not in answer
        if command not in opted_in:  # FLARE's show_scopes table spells a site's error out character by character
            assert f"this site does not allow '{command}' from the federation" in answer.replace(", ", ""), answer
    events = [e for e in AuditLog(local).entries()[since:] if e.get("user") == admin]
    refused = {e["command"] for e in events if e["event"] == "command_refused"}
    assert refused == set(answers) - opted_in and {e["role"] for e in events} == {role}
    assert {e["command"] for e in events if e["event"] == "command_allowed"} == opted_in


def test_a_site_that_opts_a_role_in_answers_that_command(running_federation):
    with site_policy(running_federation, "site-2", admin_command_roles={"sys_info": ("project_admin",)}):
        session = running_federation.session(ADMIN)
        try:
            allowed, other = session.do_command("sys_info client site-2"), session.do_command("report_env site-2")
        finally:
            session.close()

    assert "does not allow" not in json.dumps(allowed) and "does not allow 'report_env'" in json.dumps(other)


def test_no_code_of_a_job_runs_at_a_site_even_from_super(running_federation, fedavg_job_dir, tmp_path):
    """Every site accepts `super` as a submitter; FLARE would let it past the byoc right and skip the allow-list."""
    marker = tmp_path / "ran-at-a-site"
    job_dir = Path(shutil.copytree(fedavg_job_dir, tmp_path / "with-code"))
    (job_dir / "app" / "custom").mkdir()
    (job_dir / "app" / "custom" / "marker_task.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "from nvflare.apis.executor import Executor\n\n\nclass MarkerTask(Executor):\n"
        "    def execute(self, task_name, shareable, fl_ctx, abort_signal):\n        return shareable\n")
    (job_dir / "app" / "config" / "hook.py").write_text("print('a script beside the configuration')\n")
    _edit_site_config(job_dir,
                      lambda config, args: config["executors"][0]["executor"].update(path="marker_task.MarkerTask"))

    with ExitStack() as stack:
        for site in running_federation.federation.sites:
            stack.enter_context(site_policy(running_federation, site,
                                            accepted_submitter_roles=("project_admin", "super")))
        outcome = _submit(running_federation, job_dir, admin=SUPER_ADMIN)

    _refused_at_deploy(running_federation, outcome, "carries files other than configuration (config/hook.py, "
                       "custom/marker_task.py)", "class marker_task.MarkerTask (executors[0].executor)")
    assert not marker.exists()


def test_a_job_edited_to_run_an_unlisted_class_or_read_a_path_is_refused_at_deploy(running_federation, fedavg_job_dir,
                                                                                   tmp_path):
    job_dir = Path(shutil.copytree(fedavg_job_dir, tmp_path / "tampered"))

    def tamper(config, args):
        config["components"].append({"id": "run", "path": "subprocess.Popen", "args": {"args": ["id"]}})
        args["dataset"] = "../../../etc"

    _edit_site_config(job_dir, tamper)
    outcome = _submit(running_federation, job_dir)

    # at deploy, not at the first round's start: each site's audit log holds only job_seen and job_refused
    _refused_at_deploy(running_federation, outcome, "class subprocess.Popen (components[1])",
                       "dataset key dataset='../../../etc' is not one this site maps")


def test_a_real_job_runs_downloads_and_leaves_ledger_and_audit_entries(running_federation, fedavg_run):
    """The default FedAvg job's run (tests/conftest.py, shared with the reference-weights test): site-1 refused the
    admin its stats while a job ran there (a long one beside it), and every site kept its ledger and audit entries."""
    outcome, stats, listed = fedavg_run.outcome, fedavg_run.site_1_stats, fedavg_run.listed
    site_1 = AuditLog(running_federation.federation.kit("site-1") / "local")

    # FLARE renders a site's refusal of these two as "invalid_reply"; the reason is in the site's audit log
    assert all('{"site-1": "invalid_reply"}' in answer for answer in stats), stats
    assert {(e["command"], e["user"]) for e in site_1.entries() if e["event"] == "command_refused"} >= \
        {("show_stats", ADMIN), ("show_errors", ADMIN)}
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
    assert (running_federation.federation.kit("site-3") / outcome.job_id / "log.txt").is_file()
    assert _readable_by_others(running_federation, outcome.job_id) == []


def _readable_by_others(running_federation, job_id: str) -> list[str]:
    """What the federation wrote for a job (its workspaces, logs, ledger, audit log, server storage) that group or
    others may read."""
    federation = running_federation.federation
    walked = [federation.kit(federation.server) / "storage"]
    single = []
    for name in (federation.server, *federation.sites):
        kit = federation.kit(name)
        walked.append(kit / job_id)
        single += [kit, kit / "local", kit / "log.txt", kit / "process.log"]
        single += [kit / "local" / f for f in ("audit_log.jsonl", "privacy_ledger.jsonl", "site_policy.json")]
    paths = ([p for root in walked if root.is_dir() for p in [root, *root.rglob("*")]]
             + [p for p in single if p.exists()])
    return [f"{p} {p.stat().st_mode & 0o777:o}" for p in paths if not p.is_symlink() and p.stat().st_mode & 0o077]


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


def test_a_site_requiring_masked_weights_refuses_plain_ones_and_records_the_masked_job(running_federation,
                                                                                       fedavg_job_dir, tmp_path):
    """require_secure_aggregation: the plain FedAvg job is refused at site-1 before it starts, naming the rule; the
    same job with secure_aggregation runs (each round masked, the global model from the sum) and the site's ledger
    and audit log say it was masked."""
    masked = export(build_job(FEDAVG_LINEAR, FedAvgLinearParams(num_rounds=2, secure_aggregation=True,
                                                                update_l2_bound=10.0)), tmp_path)
    with site_policy(running_federation, "site-1", require_secure_aggregation=True, min_secure_aggregation_sites=3):
        plain, secure = _submit(running_federation, fedavg_job_dir), _submit(running_federation, masked,
                                                                             download=True)

    assert not plain.completed
    assert "this site sends weights only masked (require_secure_aggregation)" in plain.refusal()
    assert secure.completed, secure.status
    results = secure.results()
    assert [r["secure_aggregation"]["survivors"] for r in results["rounds"]] == [["site-1", "site-2", "site-3"]] * 2
    for entry in results["rounds"]:  # every task of the masked round is metered, per site, in results.json
        assert {site: sorted(row["task"] for row in rows) for site, rows in entry["transfers"].items()} == {
            site: ["masked_update", "shares", "train", "unmask"] for site in ("site-1", "site-2", "site-3")}
    kit = running_federation.federation.kit("site-1") / "local"
    charged = [e for e in Ledger(kit).entries() if e["job_id"] == secure.job_id]
    assert [e["secure_aggregation"] for e in charged] == [True]
    sent = [e for e in AuditLog(kit).entries(secure.job_id) if e["event"] == "result_sent"]
    assert [e["task"] for e in sent] == ["train", "shares", "masked_update", "unmask"] * 2
    assert all(e["masked"] == "secure aggregation" for e in sent if e["task"] == "masked_update")


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


def test_a_meta_that_claims_more_dp_than_the_job_has_is_refused_at_deploy(running_federation, tmp_path):
    job_dir = export(build_job(SEGMENTATION, SegmentationParams(num_rounds=1, min_clients=3, dp_clip_norm=1.0,
                                                                dp_noise_multiplier=2.0, **CPU_DEMO)), tmp_path)
    _edit_site_config(job_dir, lambda config, args: args.update(dp_noise_multiplier=0.0))

    outcome = _submit(running_federation, job_dir)

    _refused_at_deploy(running_federation, outcome, "dp_noise_multiplier=0.0 (declared 2.0)")
