"""fl-provision: real FLARE kits with our policy written into every participant's local/ folder."""

from __future__ import annotations

import importlib.util
import json

import pytest

from jobs.registry import kinds, server_allow_list, site_allow_list
from provisioning.policy import authorization_policy
from provisioning.provision import customise, load_template, main, provision
from site_agent.privacy.policy import load_policy


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
    [guard] = [c for c in resources["components"] if c["id"] == "site_guard"]
    assert guard["path"] == "site_agent.privacy.site_guard.SiteGuard"
    assert guard["args"]["kind_tasks"] == {name: kind.site_task for name, kind in kinds().items()}


def test_every_kit_launches_jobs_from_a_warm_process_that_imports_its_sides_modules(federation):
    for kit, launcher, classes in (("site-a", "WarmClientJobLauncher", site_allow_list()),
                                   ("localhost", "WarmServerJobLauncher", server_allow_list())):
        resources = json.loads((federation.kit(kit) / "local" / "resources.json").read_text())
        [component] = [c for c in resources["components"] if c["id"] == "process_launcher"]

        assert component["path"] == f"fl_runtime.job_launcher.{launcher}"
        assert set(component["args"]["preload"]) == {path.rpartition(".")[0] for path in classes}
        assert all(importlib.util.find_spec(module) for module in component["args"]["preload"])


def test_sites_get_a_default_privacy_policy_with_the_accepted_roles(federation):
    policy = load_policy(federation.kit("site-a") / "local")

    assert policy.accepted_submitter_roles == ("lead",)
    assert policy.allowed_job_kinds == tuple(kinds())
    assert policy.shell_command_roles == ()


def test_private_keys_and_the_ca_state_are_owner_only(federation):
    mode = {path: path.stat().st_mode & 0o777 for path in federation.kits_dir.parent.rglob("*")}
    keys = [p for p in mode if p.suffix == ".key"]

    assert mode[federation.ca_state] == 0o700 and mode[federation.ca_state / "cert.json"] == 0o600
    assert "root_pri_key" in json.loads((federation.ca_state / "cert.json").read_text())  # the root CA's private key
    assert len(keys) == 4 and {mode[k] for k in keys} == {0o600}
    assert {mode[k.parent] for k in keys} == {0o700}


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


def test_the_server_waits_30_s_for_a_deployment_and_drops_a_silent_site_after_20_s(federation):
    """FLARE reads both from the first `servers` entry of the server's merged resources (its log says "server
    heartbeat timeout set to 20"); 10 s for a deployment left busy sites out of jobs (provisioning/policy.py)."""
    servers = json.loads((federation.kit("localhost") / "local" / "resources.json").read_text())["servers"]

    assert [(s["admin_timeout"], s["heart_beat_timeout"]) for s in servers] == [(30.0, 20)]


def test_no_role_may_run_custom_code(federation):
    for kit in (federation.kit("localhost"), federation.kit("site-a")):
        policy = json.loads((kit / "local" / "authorization.json").read_text())
        assert policy == authorization_policy()
        byoc = {role: rights["byoc"] for role, rights in policy["permissions"].items()}
        assert byoc == dict.fromkeys(policy["permissions"], "none")
        assert all(isinstance(rights, dict) for rights in policy["permissions"].values())  # never the string "any"


def test_allow_lists_name_importable_classes_not_packages():
    for entry in site_allow_list() + server_allow_list():
        module_name, _, class_name = entry.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module_name), class_name), type), entry


def test_unknown_admin_role_is_refused():
    with pytest.raises(ValueError, match="unknown admin role 'root'"):
        customise(load_template(None), admins={"x@y.org": "root"})


def test_command_line_provisions_the_template(tmp_path, capsys):
    assert main(["--workspace", str(tmp_path), "--sites", "st-mary,general", "--port", "18556",
                 "--flare-job-launcher"]) == 0

    out = capsys.readouterr().out
    assert "st-mary" in out and "general" in out
    for kit in ("localhost", "general"):
        resources = json.loads((tmp_path / "hospital-federation" / "prod_00" / kit / "local" / "resources.json")
                               .read_text())
        [launcher] = [c for c in resources["components"] if c["id"] == "process_launcher"]
        assert launcher["path"].startswith("nvflare.app_common.job_launcher.")  # FLARE's own, as asked
    state = tmp_path / "hospital-federation" / "state"
    assert f"root CA's private key, and every participant's, is in {state / 'cert.json'}" in out
    assert "offline" in out


def test_kits_are_added_under_the_same_root_ca_only_with_its_state(tmp_path, capsys):
    first = provision(customise(load_template(None), sites=["st-mary"], port=18557), tmp_path)
    offline = tmp_path / "offline-state"
    first.ca_state.rename(offline)

    assert main(["--workspace", str(tmp_path), "--sites", "st-mary,general", "--port", "18557"]) == 1
    assert "state/cert.json is missing but kits of hospital-federation exist" in capsys.readouterr().err
    offline.rename(first.ca_state)
    second = provision(customise(load_template(None), sites=["st-mary", "general"], port=18557), tmp_path)

    root_ca = (first.kit("st-mary") / "startup" / "rootCA.pem").read_bytes()
    assert (second.kit("general") / "startup" / "rootCA.pem").read_bytes() == root_ca
    assert (second.kit("st-mary") / "startup" / "client.crt").read_bytes() == \
        (first.kit("st-mary") / "startup" / "client.crt").read_bytes()
    assert (tmp_path / "hospital-federation" / "prod_00" / "st-mary" / "local" / "resources.json").is_file()
