"""The site guard's rules: who may submit, which agent version, what a job declares, what it really runs, which
admin commands reach the site."""

from __future__ import annotations

import dataclasses
import json

import pytest
from nvflare.apis.fl_constant import AdminCommandNames

from fl_contract.job_params import SegmentationParams, job_component_args
from fl_contract.job_privacy import DP_STATISTICS, WEIGHTS, SitePrivacy
from site_agent.privacy.policy import SHELL_COMMANDS as POLICY_SHELL_COMMANDS
from site_agent.privacy.policy import (
    SITE_COMMANDS,
    PolicyError,
    SitePolicy,
    command_refusal,
    job_refusal,
    load_policy,
    shell_refusal,
)
from site_agent.privacy.site_guard import SHELL_COMMANDS, admission_refusal, component_refusal, site_relative

KINDS = ("brats-segmentation", "fedavg-linear", "fedkt-csd")
POLICY = SitePolicy(allowed_job_kinds=KINDS, min_dp_noise_multiplier=1.0, max_release_epsilon=5.0,
                    min_secure_aggregation_sites=4)
SEGMENTATION_TASK = "site_agent.tasks.segmentation.SegmentationTask"
KIND_TASKS = {"brats-segmentation": SEGMENTATION_TASK,
              "fedavg-linear": "site_agent.tasks.fedavg_linear.LinearRegressionTask",
              "fedkt-csd": "site_agent.tasks.fedkt_csd.FedKTCSDTask"}


def _meta(privacy: SitePrivacy, version: str = "1.2.0") -> dict:
    return {"site_agent_version": version, **privacy.meta()}


def _segmentation(clip: float = 1.0, noise: float = 1.2) -> SitePrivacy:
    return SitePrivacy("brats-segmentation", WEIGHTS, dp_clip_norm=clip, dp_noise_multiplier=noise, num_rounds=3)


def _release(epsilon: float = 4.0, min_clients: int = 4) -> SitePrivacy:
    return SitePrivacy("fedkt-csd", DP_STATISTICS, epsilon=epsilon, delta=1e-5, min_clients=min_clients)


def test_job_within_the_policy_is_admitted():
    for privacy in (_segmentation(), _release()):
        assert admission_refusal("lead", _meta(privacy), POLICY, installed_version="1.2.0") == ""


def test_super_role_is_refused_when_not_accepted():
    reason = admission_refusal("super", _meta(_segmentation()), POLICY, installed_version="1.2.0")

    assert "'super'" in reason and "project_admin" in reason


def test_other_agent_version_is_refused_naming_both_versions():
    reason = admission_refusal("lead", _meta(_segmentation()), POLICY, installed_version="1.3.0")

    assert "built for site_agent 1.2.0" in reason and "runs site_agent 1.3.0" in reason


def test_job_without_a_recorded_version_or_declaration_is_refused():
    assert "does not record the site_agent version" in admission_refusal("lead", {}, POLICY, installed_version="1.2.0")
    reason = admission_refusal("lead", {"site_agent_version": "1.2.0"}, POLICY, installed_version="1.2.0")
    assert "does not declare its kind and privacy" in reason


def test_kind_the_site_does_not_run_is_refused():
    policy = SitePolicy(allowed_job_kinds=("fedavg-linear",))

    reason = job_refusal(policy, "lead", _segmentation())

    assert "runs only job kinds ['fedavg-linear']; the job is a 'brats-segmentation' job" in reason


@pytest.mark.parametrize("clip, noise", [(0.0, 0.0), (1.0, 0.0), (0.0, 2.0), (1.0, 0.5)])
def test_weights_below_the_dp_floor_are_refused(clip, noise):
    reason = job_refusal(POLICY, "lead", _segmentation(clip, noise))

    assert "requires client-side DP" in reason and f"dp_noise_multiplier={noise}" in reason


def test_release_over_the_epsilon_cap_or_with_too_few_sites_is_refused():
    assert "release epsilon of at most 5.0; the job declares epsilon=10.0" in job_refusal(POLICY, "lead",
                                                                                           _release(epsilon=10.0))
    assert "at least 4 sites; the job needs only min_clients=3" in job_refusal(POLICY, "lead", _release(min_clients=3))


def test_a_site_requiring_secure_aggregation_refuses_plain_weights_and_masks_among_too_few():
    policy = dataclasses.replace(POLICY, require_secure_aggregation=True)
    masked = dataclasses.replace(_segmentation(), secure_aggregation=True, min_clients=4)

    assert "sends weights only masked (require_secure_aggregation)" in job_refusal(policy, "lead", _segmentation())
    assert job_refusal(policy, "lead", masked) == ""
    assert "at least 4 sites; the job needs only min_clients=3" in job_refusal(
        policy, "lead", dataclasses.replace(masked, min_clients=3))
    assert job_refusal(POLICY, "lead", _segmentation()) == ""  # without the rule, plain weights are the site's choice
    assert masked.masked and not _segmentation().masked and _release().masked


def test_a_declaration_claiming_masks_the_job_does_not_have_is_refused_at_start():
    claims = dataclasses.replace(_segmentation(), secure_aggregation=True)
    assert "secure_aggregation=False (declared True)" in component_refusal(_segmentation_task(), claims, KIND_TASKS)
    with pytest.raises(ValueError, match="not true or false"):
        SitePrivacy.from_meta({"job_kind": "fedavg-linear", "site_privacy": {"release": WEIGHTS,
                                                                             "secure_aggregation": 1}})


def test_a_policy_file_with_a_non_boolean_rule_is_invalid(tmp_path):
    (tmp_path / "site_policy.json").write_text(json.dumps({"require_secure_aggregation": "yes"}))
    with pytest.raises(PolicyError, match="require_secure_aggregation is 'yes'; expected true or false"):
        load_policy(tmp_path)


def _segmentation_task(**params: object) -> dict[str, object]:
    """The site task component a brats-segmentation job builds, with the parameters `_segmentation` declares."""
    job = SegmentationParams(**{"dp_clip_norm": 1.0, "dp_noise_multiplier": 1.2, "num_rounds": 3, "min_clients": 1,
                                **params})
    return {"path": SEGMENTATION_TASK, "args": job_component_args("brats-segmentation", job)}


def test_site_task_matching_the_declaration_is_built():
    component = _segmentation_task()

    assert component_refusal(component, _segmentation(), KIND_TASKS) == ""
    assert component_refusal({"path": "nvflare.app_opt.tracking.tb.tb_writer.TBWriter"}, _segmentation(),
                             KIND_TASKS) == ""


def test_site_task_weaker_than_declared_is_refused_at_start():
    reason = component_refusal(_segmentation_task(dp_noise_multiplier=0.0), _segmentation(), KIND_TASKS)
    edited = _segmentation_task()
    edited["args"]["params"]["dp_clip_norm"] = -1.0  # type: ignore[index]  # a hand-edited job

    assert "differ from the job's declaration: dp_noise_multiplier=0.0 (declared 1.2)" in reason
    assert "dp_clip_norm=-1.0: must be at least 0.0" in component_refusal(edited, _segmentation(), KIND_TASKS)


def test_task_of_another_kind_or_release_is_refused_at_start():
    disguised = SitePrivacy("fedavg-linear", WEIGHTS, num_rounds=3)

    assert "declares kind 'fedavg-linear'" in component_refusal({"class_path": SEGMENTATION_TASK}, disguised,
                                                                KIND_TASKS)
    assert "do not carry the declared kind" in component_refusal({"path": SEGMENTATION_TASK, "args": {}},
                                                                 _segmentation(), KIND_TASKS)
    as_release = SitePrivacy.declare("brats-segmentation", DP_STATISTICS, dataclasses.asdict(SegmentationParams()))
    task = {"path": SEGMENTATION_TASK, "args": job_component_args("brats-segmentation", SegmentationParams())}
    assert "sends 'weights'" in component_refusal(task, as_release, KIND_TASKS)


def test_shell_commands_are_flares_file_readers_and_refused_unless_opted_in():
    assert {"ls", "cat", "head", "tail", "grep", "pwd"} <= SHELL_COMMANDS
    assert "submit_job" not in SHELL_COMMANDS

    for role in ("super", "project_admin", "lead"):
        assert "no role may run 'cat' here" in shell_refusal(SitePolicy(), role, "cat")
    opted_in = SitePolicy(shell_command_roles=("lead",))
    assert shell_refusal(opted_in, "lead", "tail") == ""
    assert "only roles ['lead']" in shell_refusal(opted_in, "super", "tail")


def test_site_commands_are_flares_and_refused_for_every_role_unless_opted_in():
    assert set(SITE_COMMANDS) <= {v for k, v in vars(AdminCommandNames).items() if not k.startswith("_")}
    assert set(POLICY_SHELL_COMMANDS) == SHELL_COMMANDS
    assert {"report_env", "sys_info", "report_resources", "configure_site_log", "show_stats", "show_errors"} <= \
        set(SITE_COMMANDS)

    for role in ("super", "project_admin", "lead"):
        assert "no role may run it here" in command_refusal(SitePolicy(), role, "sys_info")
    opted_in = SitePolicy(admin_command_roles={"report_env": ("project_admin",)})
    assert command_refusal(opted_in, "project_admin", "report_env") == ""
    assert "only roles ['project_admin']" in command_refusal(opted_in, "super", "report_env")
    assert "no role" in command_refusal(opted_in, "project_admin", "a_command_from_a_newer_flare")


@pytest.mark.parametrize("value, expected", [
    ({"sys_inf": ["lead"]}, "not FLARE commands that reach a site"),
    ({"cat": ["lead"]}, "use shell_command_roles for ['cat']"),
    (["sys_info"], "expected an object such as"),
    ({"sys_info": "lead"}, "expected an object such as"),
])
def test_a_misspelt_or_malformed_command_opt_in_invalidates_the_policy(tmp_path, value, expected):
    (tmp_path / "site_policy.json").write_text(json.dumps({"admin_command_roles": value}))

    with pytest.raises(PolicyError, match="admin_command_roles") as raised:
        load_policy(tmp_path)
    assert expected in str(raised.value)


def test_what_leaves_the_site_names_no_local_path(tmp_path):
    kit = tmp_path / "site-1"
    problem = f"{kit}/local/site_policy.json: not found; every job is refused"

    assert site_relative(problem, kit) == "local/site_policy.json: not found; every job is refused"
