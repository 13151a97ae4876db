"""The site guard's admission rule: accepted submitter roles and the agent version the job was built for."""

from site_agent.site_guard import admission_refusal

META = {"site_agent_version": "1.2.0"}


def test_accepted_role_and_matching_version_are_admitted():
    assert admission_refusal("lead", META, ["project_admin", "lead"], installed_version="1.2.0") == ""


def test_super_role_is_refused_when_not_accepted():
    reason = admission_refusal("super", META, ["project_admin", "lead"], installed_version="1.2.0")

    assert "'super'" in reason and "project_admin" in reason


def test_other_agent_version_is_refused_naming_both_versions():
    reason = admission_refusal("lead", META, ["lead"], installed_version="1.3.0")

    assert "built for site_agent 1.2.0" in reason and "runs site_agent 1.3.0" in reason


def test_job_without_a_recorded_version_is_refused():
    assert "does not record the site_agent version" in admission_refusal("lead", {}, ["lead"], installed_version="1.2.0")
