"""fl-provision: real FLARE kits with our policy written into every participant's local/ folder."""

from __future__ import annotations

import importlib
import json

import pytest

from provisioning.policy import authorization_policy, server_allow_list, site_allow_list
from provisioning.provision import customise, load_template, main, provision


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    project = customise(load_template(None), sites=["site-a", "site-b"], admins={"lead@x.org": "lead"}, port=18555)
    return provision(project, tmp_path_factory.mktemp("prov") / "ws", accepted_roles=["lead"])


def test_kits_for_server_sites_and_admins(federation):
    assert federation.sites == ["site-a", "site-b"]
    assert (federation.kit("localhost") / "startup" / "server.crt").is_file()
    assert (federation.kit("site-a") / "startup" / "client.crt").is_file()
    assert (federation.kit("lead@x.org") / "startup" / "fed_admin.json").is_file()


def test_sites_enforce_exact_classes_and_run_the_site_guard(federation):
    resources = json.loads((federation.kit("site-b") / "local" / "resources.json").read_text())

    assert resources["class_list_enforcement_mode"] == "enforce"
    assert resources["class_allow_list"] == site_allow_list()
    guard = [c for c in resources["components"] if c["id"] == "site_guard"]
    assert guard == [{"id": "site_guard", "path": "site_agent.site_guard.SiteGuard", "args": {"accepted_submitter_roles": ["lead"]}}]


def test_site_logs_stay_at_the_site_by_default(federation):
    resources = json.loads((federation.kit("site-a") / "local" / "resources.json").read_text())

    assert resources["allow_log_streaming"] is False
    assert not [c for c in resources["components"] if c["path"].endswith("SiteLogStreamer")]


def test_server_storage_lives_inside_the_federation_workspace(federation):
    resources = json.loads((federation.kit("localhost") / "local" / "resources.json").read_text())
    job_manager = next(c for c in resources["components"] if c["id"] == "job_manager")
    snapshots = resources["snapshot_persistor"]["args"]["storage"]["args"]["root_dir"]

    assert resources["class_allow_list"] == server_allow_list()
    assert job_manager["args"]["uri_root"].startswith(str(federation.kits_dir))
    assert snapshots.startswith(str(federation.kits_dir))
    assert "/tmp/nvflare" not in json.dumps(resources)


def test_no_role_may_run_custom_code(federation):
    for kit in (federation.kit("localhost"), federation.kit("site-a")):
        policy = json.loads((kit / "local" / "authorization.json").read_text())
        assert policy == authorization_policy()
        assert {role: rights["byoc"] for role, rights in policy["permissions"].items()} == dict.fromkeys(policy["permissions"], "none")
        assert all(isinstance(rights, dict) for rights in policy["permissions"].values())  # never the string "any"


def test_allow_lists_name_importable_classes_not_packages():
    for entry in site_allow_list() + server_allow_list():
        module_name, _, class_name = entry.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module_name), class_name), type), entry


def test_unknown_admin_role_is_refused():
    with pytest.raises(ValueError, match="unknown admin role 'root'"):
        customise(load_template(None), admins={"x@y.org": "root"})


def test_command_line_provisions_the_template(tmp_path, capsys):
    assert main(["--workspace", str(tmp_path), "--sites", "st-mary,general", "--port", "18556"]) == 0

    out = capsys.readouterr().out
    assert "st-mary" in out and "general" in out
    assert (tmp_path / "hospital-federation" / "prod_00" / "st-mary" / "local" / "resources.json").is_file()
