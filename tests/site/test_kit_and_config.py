"""Startup-kit certificate checks (the holes FLARE's preflight leaves open) and the site configuration."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import pytest

from provisioning.provision import customise, load_template, provision
from site_agent.cli import main
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.data.isic import IMAGE_FOLDER
from site_agent.kit.preflight import format_table, run_checks
from site_agent.kit.site_config import SiteConfig, SiteConfigError, write_site_config
from site_agent.kit.startup import KitError, verify_certificate_chain


@pytest.fixture(scope="module")
def two_federations(tmp_path_factory):
    root = tmp_path_factory.mktemp("kits")
    ours = provision(customise(load_template(None), name="ours", sites=["site-1"], port=18601), root / "ours")
    theirs = provision(customise(load_template(None), name="theirs", sites=["site-1"], port=18602), root / "theirs")
    return ours, theirs


def test_good_certificate_reports_issuer_and_days_left(two_federations):
    startup = two_federations[0].kit("site-1") / "startup"

    report = verify_certificate_chain(startup / "client.crt", startup / "client.key", startup / "rootCA.pem")

    assert report.subject == "site-1" and report.issuer == "ours" and 300 < report.days_left <= 360


def test_certificate_from_another_ca_is_refused(two_federations, tmp_path):
    ours, theirs = (f.kit("site-1") / "startup" for f in two_federations)

    with pytest.raises(KitError, match=r"not signed by this kit's root CA.*issuer 'theirs', root CA 'ours'"):
        verify_certificate_chain(theirs / "client.crt", theirs / "client.key", ours / "rootCA.pem")


def test_key_from_another_kit_is_refused(two_federations):
    ours, theirs = (f.kit("site-1") / "startup" for f in two_federations)

    with pytest.raises(KitError, match="client.key: does not belong to"):
        verify_certificate_chain(ours / "client.crt", theirs / "client.key", ours / "rootCA.pem")


def test_expired_certificate_is_refused(two_federations):
    startup = two_federations[0].kit("site-1") / "startup"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)

    with pytest.raises(KitError, match="expired on .* re-provision"):
        verify_certificate_chain(startup / "client.crt", startup / "client.key", startup / "rootCA.pem", now=later)


def test_check_fails_with_reason_and_fix_for_missing_data(two_federations, tmp_path):
    kit = tmp_path / "site-1"
    shutil.copytree(two_federations[0].kit("site-1"), kit)
    write_site_config(kit, {"linear": str(tmp_path / "nowhere")})

    results = {r.name: r for r in run_checks(kit, skip_server=True)}

    assert results["certificate"].status == "OK"
    assert results["site policy"].status == "OK"
    assert results["data linear"].status == "FAIL" and "nowhere, which is not a folder" in results["data linear"].detail
    assert "To fix:" in format_table(list(results.values()))


def test_check_fails_when_server_is_unreachable(two_federations):
    results = {r.name: r for r in run_checks(two_federations[0].kit("site-1"))}

    assert results["server"].status == "FAIL" and "cannot reach localhost:18601" in results["server"].detail


def test_check_names_a_missing_kit(tmp_path):
    [result] = run_checks(tmp_path)

    assert result.status == "FAIL" and "fed_client.json: not found" in result.detail


def test_site_config_errors_name_the_file_and_field(tmp_path):
    path = tmp_path / "site_agent.json"
    path.write_text(json.dumps({"datasets": {"linear": "/x"}, "gpu": True}))

    with pytest.raises(SiteConfigError, match=r"site_agent.json: unknown fields \['gpu'\]"):
        SiteConfig.load(path)
    path.write_text("{not json")
    with pytest.raises(SiteConfigError, match="not valid JSON"):
        SiteConfig.load(path)


def test_dataset_paths_may_name_the_site(tmp_path):
    (tmp_path / "site-7").mkdir()
    config = SiteConfig.load(write_site_config(tmp_path, {"linear": str(tmp_path / "{site_name}")}))

    assert config.data_dir("linear", "site-7") == tmp_path / "site-7"
    with pytest.raises(SiteConfigError, match='no dataset "brats" configured'):
        config.data_dir("brats", "site-7")


def test_check_warns_when_the_kit_predates_the_agents_job_classes(two_federations, tmp_path):
    kit = tmp_path / "site-1"
    shutil.copytree(two_federations[0].kit("site-1"), kit)
    resources_path = kit / "local" / "resources.json"
    resources = json.loads(resources_path.read_text())
    resources["class_allow_list"].remove("site_agent.tasks.fedavg_linear.LinearRegressionTask")
    resources_path.write_text(json.dumps(resources))

    [policy] = [r for r in run_checks(kit, skip_server=True) if r.name == "site policy"]

    assert policy.status == "WARN" and "LinearRegressionTask" in policy.detail and "re-provisioned kit" in policy.fix


def test_deep_check_from_the_command_line_lists_each_bad_file_and_exits_1(two_federations, tmp_path, capsys):
    kit = tmp_path / "site-1"
    shutil.copytree(two_federations[0].kit("site-1"), kit)
    site = write_isic_site(tmp_path / "isic", 1, n_images=12, size=24)
    broken = sorted((site / IMAGE_FOLDER).iterdir())[4]
    broken.write_bytes(b"\xff\xd8 not a jpeg")
    write_site_config(kit, {"isic": str(site)})

    quick = main(["check", "--kit", str(kit), "--skip-server"])
    quick_out = capsys.readouterr().out
    deep = main(["check", "--kit", str(kit), "--skip-server", "--deep"])
    deep_out, deep_err = capsys.readouterr()

    assert quick == 0 and "data isic" in quick_out and "12 images" in quick_out
    assert deep == 1 and "data isic: 1 problem(s):" in deep_out and f"  {broken}: image does not decode" in deep_out
    assert "FAILED: data isic" in deep_out and deep_err.endswith("data isic [##############################] 12/12\n")
