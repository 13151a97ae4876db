"""`site-agent check` on what the hospital controls: the key at rest, local/custom, the privacy policy in force."""

from __future__ import annotations

from site_agent.kit.preflight import run_checks


def _rows(kit):
    return {r.name: r for r in run_checks(kit, skip_server=True)}


def test_a_provisioned_kit_passes_and_shows_the_policy_in_force(kit):
    rows = _rows(kit)

    assert rows["private key"].status == "OK" and "mode 600" in rows["private key"].detail
    policy = rows["privacy policy"]
    assert policy.status == "OK"
    kinds = ("brats-evaluation, brats-inference, brats-segmentation, data-summary, fedavg-linear, fedkt-csd, "
             "isic-evaluation, playerfl")
    assert f"kinds {kinds}" in policy.detail
    assert "shell commands: nobody" in policy.detail and "budget epsilon 30.0" in policy.detail
    assert f"ledger and audit log in {kit / 'local'}" in policy.detail


def test_a_key_readable_by_group_or_others_fails(kit):
    (kit / "startup" / "client.key").chmod(0o640)

    row = _rows(kit)["private key"]

    assert row.status == "FAIL" and "readable by group or others (mode 640)" in row.detail and "chmod 600" in row.fix


def test_a_local_custom_folder_fails(kit):
    (kit / "local" / "custom").mkdir()

    row = _rows(kit)["site policy"]

    assert row.status == "FAIL" and "local/custom exists" in row.detail


def test_a_missing_or_malformed_privacy_policy_fails(kit):
    policy_file = kit / "local" / "site_policy.json"
    policy_file.write_text('{"budget_epsilon": "lots"}')
    assert "budget_epsilon is 'lots'" in _rows(kit)["privacy policy"].detail

    policy_file.unlink()
    row = _rows(kit)["privacy policy"]

    assert row.status == "FAIL" and "not found; every job is refused" in row.detail
