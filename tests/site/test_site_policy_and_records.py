"""The site's policy file, its privacy accounting, the budget ledger and the audit log, without FLARE processes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from fl_contract.job_privacy import DP_STATISTICS, WEIGHTS, SitePrivacy
from provisioning.policy import DEFAULT_ACCEPTED_ROLES, default_site_policy
from server_app.privacy.dp_calibration import composed_epsilon
from site_agent.cli import main
from site_agent.privacy.accounting import CLIENT_DP_DELTA, client_dp_epsilon, job_spend
from site_agent.privacy.audit import RESULT_SENT, AuditLog, format_audit
from site_agent.privacy.ledger import Ledger
from site_agent.privacy.policy import POLICY_FILE, PolicyError, PolicyInForce, SitePolicy, load_policy, write_policy


def test_policy_round_trips_through_its_file(tmp_path):
    policy = SitePolicy(allowed_job_kinds=("fedavg-linear",), shell_command_roles=("lead",), budget_epsilon=12.5)

    write_policy(tmp_path, policy)

    assert load_policy(tmp_path) == policy
    assert json.loads((tmp_path / POLICY_FILE).read_text())["shell_command_roles"] == ["lead"]


@pytest.mark.parametrize("content, message", [
    (None, "site_policy.json: not found; every job is refused"),
    ("{", "not valid JSON"),
    ('{"max_release_epsilom": 1}', "unknown fields ['max_release_epsilom']"),
    ('{"budget_epsilon": -1}', "budget_epsilon is -1; expected a number >= 0"),
    ('{"allowed_job_kinds": "fedkt-csd"}', "allowed_job_kinds is 'fedkt-csd'; expected a list of names"),
])
def test_a_bad_policy_file_names_the_file_and_the_field(tmp_path, content, message):
    if content is not None:
        (tmp_path / POLICY_FILE).write_text(content)

    with pytest.raises(PolicyError) as raised:
        load_policy(tmp_path)
    assert message in str(raised.value)
    assert PolicyInForce.read(tmp_path).policy is None


def test_records_stay_in_local_unless_site_it_names_a_folder(tmp_path):
    write_policy(tmp_path, SitePolicy())
    assert PolicyInForce.read(tmp_path).records == tmp_path

    write_policy(tmp_path, SitePolicy(records_dir=str(tmp_path / "audit")))
    assert PolicyInForce.read(tmp_path).records == tmp_path / "audit"


def test_client_dp_epsilon_composes_rounds_with_dp_accounting():
    assert client_dp_epsilon(1.0, 5) == pytest.approx(composed_epsilon(1.0, 5, CLIENT_DP_DELTA))
    assert client_dp_epsilon(1.0, 1) < client_dp_epsilon(1.0, 5) < client_dp_epsilon(0.8, 5)
    assert client_dp_epsilon(0.0, 5) == math.inf


def test_what_each_job_spends():
    release = job_spend(SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=3.0, delta=1e-6, min_clients=3))
    dp_weights = job_spend(SitePrivacy("brats-segmentation", WEIGHTS, dp_clip_norm=1.0, dp_noise_multiplier=1.0,
                                       num_rounds=5))

    assert (release.epsilon, release.delta) == (3.0, 1e-6)
    assert dp_weights.epsilon == pytest.approx(client_dp_epsilon(1.0, 5)) and dp_weights.delta == CLIENT_DP_DELTA
    assert all(part in dp_weights.basis
               for part in ("clip 1.0", "noise multiplier 1.0", "sampling rate 1.0", "5 rounds"))
    assert job_spend(SitePrivacy("fedavg-linear", WEIGHTS, num_rounds=5)) is None


def test_ledger_charges_within_the_budget_and_refuses_past_it(tmp_path):
    ledger, policy = Ledger(tmp_path), SitePolicy(budget_epsilon=10.0, budget_delta=1e-4)
    spend = job_spend(SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=6.0, delta=1e-5, min_clients=3))

    assert ledger.charge("job-1", "fedkt-csd", "lead@x.org", spend, policy) == ""
    assert ledger.charge("job-2", "fedavg-linear", "lead@x.org", None, policy) == ""
    reason = ledger.charge("job-3", "fedkt-csd", "lead@x.org", spend, policy)

    assert "would spend epsilon 6" in reason and "has spent epsilon 6" in reason and "budget epsilon 10.0" in reason
    assert [e["job_id"] for e in ledger.entries()] == ["job-1", "job-2"]
    assert ledger.entries()[1]["epsilon"] is None
    assert (ledger.totals().epsilon, ledger.totals().jobs) == (6.0, 2)
    assert (ledger.journal.path.stat().st_mode & 0o777) == 0o600


def test_a_job_started_again_at_a_returning_site_is_charged_once_and_never_refused_for_its_own_spend(tmp_path):
    """A site back after a restart is deployed and started the same job again: the job paid when it first started
    here, so neither its deploy's budget check nor its start counts it a second time; another job still does."""
    ledger, policy = Ledger(tmp_path), SitePolicy(budget_epsilon=10.0, budget_delta=1e-4)
    spend = job_spend(SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=6.0, delta=1e-5, min_clients=3))

    assert ledger.charge("job-1", "fedkt-csd", "lead@x.org", spend, policy) == ""
    assert ledger.refusal(spend, policy, "job-1") == ""
    assert ledger.charge("job-1", "fedkt-csd", "lead@x.org", spend, policy) == ""
    assert ledger.refusal(spend, policy, "job-2") != "" and ledger.charge("job-2", "fedkt-csd", "l", spend, policy)
    assert [e["job_id"] for e in ledger.entries()] == ["job-1"] and ledger.totals().epsilon == 6.0


def test_audit_log_appends_one_json_line_per_event_and_prints_a_table(tmp_path):
    log = AuditLog(tmp_path / "records")

    log.record(RESULT_SENT, "job-1", task="train", payload_bytes=120, payload_sha256="ab" * 32)
    log.record("job_end", "job-1")

    lines = log.journal.path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == [RESULT_SENT, "job_end"]
    assert (log.journal.path.parent.stat().st_mode & 0o777) == 0o700
    table = format_audit(log.entries("job-1"))
    assert table.splitlines()[0].split() == ["TIME", "EVENT", "JOB", "DETAIL"]
    assert "payload_bytes=120" in table


def test_budget_and_audit_commands_read_the_kit(tmp_path, capsys):
    local = tmp_path / "kit" / "local"
    local.mkdir(parents=True)
    write_policy(local, SitePolicy(budget_epsilon=20.0))
    spend = job_spend(SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=4.0, delta=1e-5, min_clients=3))
    Ledger(local).charge("job-7", "fedkt-csd", "lead@x.org", spend, SitePolicy(budget_epsilon=20.0))
    AuditLog(local).record("job_seen", "job-7", submitter="lead@x.org")

    assert main(["budget", "--kit", str(tmp_path / "kit")]) == 0
    assert main(["audit", "--kit", str(tmp_path / "kit"), "--job", "job-7"]) == 0

    out = capsys.readouterr().out
    assert "job-7" in out and "left epsilon 16" in out and "submitter=lead@x.org" in out


def test_the_privacy_officer_guide_explains_every_policy_field():
    guide = (Path(__file__).resolve().parents[2] / "docs" / "privacy-officer-guide.md").read_text()

    assert [f.name for f in dataclasses.fields(SitePolicy)
            if f"| `{f.name}`" not in guide and f"`{f.name}` |" not in guide] == []
    # what fl-provision writes
    assert json.dumps(default_site_policy(DEFAULT_ACCEPTED_ROLES).to_json(), indent=2) in guide
