"""A real provisioned federation on 127.0.0.1: jobs run over mutual TLS; anything unauthorised is refused."""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from support import ADMIN, FEDAVG_REFERENCE, SITES, SUPER_ADMIN, free_port, screenshot

from federation_tools.admin import submit_and_wait
from fl_contract.params import params_to_json
from fl_contract.segmentation import INFERENCE_KEYS
from jobs.common import build_job, export
from jobs.evaluation.spec import KIND as EVALUATION
from jobs.evaluation.spec import EvaluationParams
from jobs.inference.spec import KIND as INFERENCE
from jobs.inference.spec import InferenceParams
from jobs.segmentation.spec import CPU_DEMO, SegmentationParams
from jobs.segmentation.spec import KIND as SEGMENTATION
from provisioning.provision import Federation, customise, load_template, provision
from reports import evaluation_cli
from reports import segmentation as segmentation_report
from server_app.server_config import ServerConfig, write_server_config
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.preflight import run_checks
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.privacy.audit import RESULT_SENT, AuditLog
from site_agent.privacy.ledger import Ledger
from site_agent.segmentation.data import split_cases
from site_agent.segmentation.metrics import case_results_path

pytestmark = pytest.mark.federation

ARCHITECTURE = {k: v for k, v in CPU_DEMO.items() if k in ("roi_size", "init_filters", "blocks_down", "blocks_up",
                                                            "dropout_prob")}
"""The segmentation run's SegResNet: what a job sending its model must declare."""
_RESTORE: list[dict[Path, str | None]] = []


@pytest.fixture(autouse=True)
def _restored_files() -> Iterator[None]:
    """The shared federation's files a test edited (restore_after, edit_policy, serve_model), as they were."""
    _RESTORE.append({})
    try:
        yield
    finally:
        for path, text in _RESTORE.pop().items():
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(text)


def restore_after(paths: Iterable[Path]) -> None:
    """Put these files back as they are now once the test ends (the federation is shared by the module)."""
    for path in paths:
        _RESTORE[-1].setdefault(path, path.read_text() if path.exists() else None)


def edit_policy(federation: Federation, site: str, **fields: Any) -> None:
    """Set these fields of the site's policy for this test."""
    path = federation.kit(site) / "local" / "site_policy.json"
    restore_after([path])
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def serve_model(federation: Federation, key: str, folder: Path) -> None:
    """Name `folder` as model `key` on the server for this test, as the lead would in server_app.json."""
    config = federation.kit(federation.server) / "local" / "server_app.json"
    restore_after([config])
    models = ServerConfig.load(config).models if config.exists() else {}
    write_server_config(federation.kit(federation.server), {**models, key: str(folder)})



def _copy_job(job_dir: Path, dest: Path) -> Path:
    target = dest / job_dir.name
    shutil.copytree(job_dir, target)
    return target


def test_fedavg_job_reproduces_reference_weights(fedavg_run, running_federation):
    """The default FedAvg job's run on the shared federation (tests/conftest.py; the site-control tests read what
    the sites kept of the same run), its job processes at the server and every site forked from the kits' warm
    processes (fl_runtime.job_launcher)."""
    outcome = fedavg_run.outcome
    federation = running_federation.federation

    assert outcome.completed, outcome.refusal()
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    weights = {r["round"]: r["global_weights"]["weight"] for r in results["rounds"]}
    for round_number, expected in FEDAVG_REFERENCE.items():
        assert weights[round_number] == pytest.approx(expected, abs=5e-4)
    assert results["status"] == "finished"
    assert ({s: v["num_samples"] for s, v in results["rounds"][0]["sites"].items()}
            == {"site-1": 50, "site-2": 200, "site-3": 500})
    assert (outcome.server_app_dir() / "global_model.pt").is_file()
    for name in (federation.server, *federation.sites):
        log = (federation.kit(name) / "log.txt").read_text(errors="replace")
        assert f"job {outcome.job_id}: forked from warm process" in log, name


@pytest.mark.parametrize("admin", [ADMIN, SUPER_ADMIN])
def test_job_with_custom_code_is_refused(running_federation, fedavg_job_dir, tmp_path, admin):
    job = _copy_job(fedavg_job_dir, tmp_path)
    (job / "app" / "custom").mkdir()
    (job / "app" / "custom" / "payload.py").write_text("import os\nos.system('echo pwned')\n")
    session = running_federation.session(admin)
    try:
        outcome = submit_and_wait(session, job, timeout=120, download=False, progress=None)
    finally:
        session.close()

    assert not outcome.completed
    reason = outcome.refusal()
    if admin == SUPER_ADMIN:  # FLARE lets 'super' bypass authorization.json; our site guard refuses the role
        assert "accepts jobs only from roles" in reason and "'super'" in reason
    else:
        assert "BYOC" in reason or "byoc" in reason


def test_class_outside_the_allow_list_is_refused(running_federation, fedavg_job_dir, tmp_path):
    job = _copy_job(fedavg_job_dir, tmp_path)
    config_path = job / "app" / "config" / "config_fed_client.json"
    config = json.loads(config_path.read_text())
    config["executors"][0]["executor"] = {"path": "nvflare.app_common.np.np_trainer.NPTrainer", "args": {}}
    config_path.write_text(json.dumps(config))
    session = running_federation.session()
    try:
        outcome = submit_and_wait(session, job, timeout=120, download=False, progress=None)
    finally:
        session.close()

    # refused at deploy by every site, naming the class (FLARE itself would refuse it only when the job starts,
    # with the class only in each site's job log)
    assert not outcome.completed
    assert ("site-1: NVFLARE_ERROR: refused at deploy: not in this site's class allow-list: class "
            "nvflare.app_common.np.np_trainer.NPTrainer (executors[0].executor)") in outcome.refusal()


def test_a_kit_whose_allow_list_predates_the_job_kind_refuses_it_naming_site_and_class(running_federation,
                                                                                      fedavg_job_dir):
    resources = running_federation.federation.kit("site-2") / "local" / "resources.json"
    original = resources.read_text()
    kit_policy = json.loads(original)
    task = "site_agent.tasks.fedavg_linear.LinearRegressionTask"
    kit_policy["class_allow_list"] = [c for c in kit_policy["class_allow_list"] if c != task]
    resources.write_text(json.dumps(kit_policy))
    session = running_federation.session()
    try:
        outcome = submit_and_wait(session, fedavg_job_dir, timeout=120, download=False, progress=None)
    finally:
        session.close()
        resources.write_text(original)

    assert not outcome.completed
    assert (f"site-2: NVFLARE_ERROR: refused at deploy: not in this site's class allow-list: class {task} "
            "(executors[0].executor)") in outcome.refusal()


def test_job_for_another_agent_version_is_refused_naming_both(running_federation, fedavg_job_dir, tmp_path):
    job = _copy_job(fedavg_job_dir, tmp_path)
    meta = json.loads((job / "meta.json").read_text())
    meta["site_agent_version"] = "0.0.1"
    (job / "meta.json").write_text(json.dumps(meta))
    session = running_federation.session()
    try:
        outcome = submit_and_wait(session, job, timeout=120, download=False, progress=None)
    finally:
        session.close()

    assert not outcome.completed
    from site_agent import __version__

    assert "site_agent 0.0.1" in outcome.refusal() and f"site_agent {__version__}" in outcome.refusal()


def _foreign_certificate_kit(running_federation, tmp_path: Path) -> Path:
    """site-1's kit (right root CA, right server) carrying a certificate issued by another federation's CA."""
    other = provision(customise(load_template(None), name="other-federation", sites=["rogue-site"], port=free_port()),
                      tmp_path / "other")
    kit = tmp_path / "rogue-site"
    shutil.copytree(running_federation.federation.kit("site-1"), kit,
                    ignore=shutil.ignore_patterns("*-*-*-*-*", "*.log", "*.txt"))
    for name in ("client.crt", "client.key"):
        shutil.copy(other.kit("rogue-site") / "startup" / name, kit / "startup" / name)
    config_path = kit / "startup" / "fed_client.json"
    config = json.loads(config_path.read_text())
    config["client"]["fqsn"] = "rogue-site"
    config_path.write_text(json.dumps(config))
    return kit


def test_site_with_certificate_from_another_ca_fails_check_and_never_joins(running_federation, tmp_path):
    """The check names the foreign CA, and its own mutual-TLS exchange shows the running server refusing the
    certificate. FLARE's client started from that kit never joins; it does not even connect (its cell is never
    created: the process waits in client_train's main), so without the check's exchange the server's refusal would
    be untested."""
    kit = _foreign_certificate_kit(running_federation, tmp_path)

    results = {r.name: r for r in run_checks(kit)}
    running_federation.loopback.start_site("rogue-site", kit=kit)
    try:
        time.sleep(15)
        session = running_federation.session()
        try:
            connected = {c.name for c in session.get_connected_client_list()}
        finally:
            session.close()
    finally:
        running_federation.loopback.stop_participant("rogue-site")

    assert results["certificate"].status == "FAIL"
    assert "not signed by this kit's root CA" in results["certificate"].detail
    assert "'other-federation'" in results["certificate"].detail
    assert results["server"].status == "FAIL" and "refused this site's certificate" in results["server"].detail
    assert "rogue-site" not in connected and set(SITES) <= connected


def test_check_passes_for_a_good_site_kit(running_federation):
    results = run_checks(running_federation.federation.kit("site-2"))

    assert [r.name for r in results if r.status == "FAIL"] == []
    assert {r.name: r.status for r in results}["server"] == "OK"


def test_inference_after_training_writes_nifti_and_dicom_seg_at_each_site_and_sends_only_counts(running_federation,
                                                                                                segmentation_run,
                                                                                                tmp_path):
    """The model is the one the shared federation's segmentation run trained (tests/conftest.py)."""
    federation = running_federation.federation
    configs = {site: federation.kit(site) / "local" / "site_agent.json" for site in SITES}
    restore_after(configs.values())
    case_ids = {}
    for index, site in enumerate(SITES, start=1):
        case_ids[site] = [c.case_id for c in write_brats_site(tmp_path / site / "cases", index, n_cases=1,
                                                              shape=(32, 32, 32), layout="dicom")]
        (tmp_path / site / "results").mkdir()
        config = SiteConfig.load(configs[site])
        write_site_config(federation.kit(site), {**{k: str(config.data_dir(k, site)) for k in ("linear", "brats")},
                                                 "brats_inference": str(tmp_path / site / "cases"),
                                                 "brats_results": str(tmp_path / site / "results")})
    trained = segmentation_run
    assert trained.completed, trained.refusal()
    session = running_federation.session()
    try:
        serve_model(federation, "glioma", trained.server_app_dir())
        params = InferenceParams(model="glioma", min_clients=3, **ARCHITECTURE)
        job = export(build_job(INFERENCE, params), tmp_path / "inference")
        outcome = submit_and_wait(session, job, timeout=600)
    finally:
        session.close()

    assert outcome.completed, outcome.refusal()
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    assert {k: results["job"].get(k) for k in params_to_json(params)} == params_to_json(params)  # every parameter
    for site in SITES:
        assert set(results["sites"][site]) == set(INFERENCE_KEYS), results["sites"][site]
        assert results["sites"][site]["cases_segmented"] == results["sites"][site]["dicom_segs_written"] == 1
        written = sorted(p.name for p in (tmp_path / site / "results" / outcome.job_id).iterdir())
        assert written == sorted(f"{c}{suffix}" for c in case_ids[site] for suffix in (".nii.gz", ".seg.dcm"))
        assert not any(c in json.dumps(results) for c in case_ids[site])


def test_evaluation_scores_the_trained_model_at_every_site_under_each_sites_own_policy(running_federation,
                                                                                       segmentation_run, tmp_path):
    """The model is the one the shared federation's segmentation run trained, scored on each site's 5 labelled
    cases. site-1's policy shares per-case rows, site-2's keeps them, site-3 asks for more cases than it has; a
    model of another label map is refused at the server before any site is sent anything."""
    federation = running_federation.federation
    edit_policy(federation, "site-1", share_case_metrics=True)
    edit_policy(federation, "site-3", share_case_metrics=True, min_cases=6)
    trained = segmentation_run
    assert trained.completed, trained.refusal()
    session = running_federation.session()
    try:
        serve_model(federation, "glioma", trained.server_app_dir())
        params = EvaluationParams(model="glioma", case_metrics=True, min_clients=3, **ARCHITECTURE)
        outcome = submit_and_wait(session, export(build_job(EVALUATION, params), tmp_path / "evaluation"),
                                  timeout=600)
        wrong = EvaluationParams(model="glioma", label_map="brats2023", **ARCHITECTURE)
        refused = submit_and_wait(session, export(build_job(EVALUATION, wrong), tmp_path / "wrong"), timeout=300)
    finally:
        session.close()

    assert outcome.completed, outcome.refusal()
    results = json.loads((outcome.server_app_dir() / "results.json").read_text())
    assert results["status"] == "finished" and results["model_identity"]["made_by"]["status"] == "finished"
    assert {k: results["job"].get(k) for k in params_to_json(params)} == params_to_json(params)
    assert sorted(results["sites"]) == SITES and all(m["eval_cases"] == 5 for m in results["sites"].values())
    assert [row["case"] for row in results["case_rows"]["site-1"]] == [f"case-00{i}" for i in range(1, 6)]
    assert sorted(results["case_rows"]) == ["site-1"]
    assert results["sites"]["site-1"]["eval_dice_wt"] == pytest.approx(
        sum(row["wt_dice"] for row in results["case_rows"]["site-1"]) / 5, abs=1e-6)
    assert results["withheld"]["site-2"] == {
        "case_rows": "the site's policy keeps per-case scores (share_case_metrics is false)"}
    assert set(results["withheld"]["site-3"]) == {"quartiles", "case_rows"}
    assert "eval_dice_wt_median" in results["sites"]["site-2"]
    assert "eval_dice_wt_median" not in results["sites"]["site-3"]
    assert results["federation"]["eval_cases"] == 15
    assert results["federation"]["eval_dice_tc"] == pytest.approx(
        sum(m["eval_dice_tc"] for m in results["sites"].values()) / 3)
    site_1 = AuditLog(federation.kit("site-1") / "local")
    assert [e.get("case_rows") for e in site_1.entries(outcome.job_id) if e["event"] == RESULT_SENT] == ["5"]
    charged = [e for e in Ledger(federation.kit("site-2") / "local").entries() if e["job_id"] == outcome.job_id]
    assert [(e["job_kind"], e["epsilon"], e["delta"]) for e in charged] == [("brats-evaluation", 0.0, 0.0)]

    assert evaluation_cli.main([str(outcome.result_dir), "--out", str(tmp_path / "report")]) == 0
    table = json.loads((tmp_path / "report" / "evaluation.json").read_text())
    assert table["model"]["sha256"] == results["model_identity"]["sha256"] and list(table["sites"]) == SITES
    assert table["sites"]["site-2"]["dice_wt"] == {
        q: results["sites"]["site-2"][f"eval_dice_wt{suffix}"]
        for q, suffix in (("mean", ""), ("q1", "_q1"), ("median", "_median"), ("q3", "_q3"))}
    page = (tmp_path / "report" / "evaluation.html").read_text()
    assert results["model_identity"]["sha256"] in page and "share_case_metrics is false" in page
    linked = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)', page)
    assert linked and all(v.startswith("data:") for v in linked) and "url(" not in page  # nothing to fetch
    shot = np.asarray(Image.open(screenshot(tmp_path / "report" / "evaluation.html", tmp_path / "report" / "page.png")))
    assert shot.shape[:2] == (1000, 1200) and shot.std() > 10  # a rendered page, not a blank one

    assert not refused.completed
    refusal = refused.results()
    assert refusal["status"] == "failed" and "label_map 'brats2021' (the job says 'brats2023')" in refusal["error"]
    for site in SITES:
        audit = AuditLog(federation.kit(site) / "local")
        assert [e for e in audit.entries(refused.job_id) if e["event"] == RESULT_SENT] == [], site


def test_cross_site_evaluation_scores_each_allowed_local_model_and_the_global_one_at_every_site(running_federation,
                                                                                                tmp_path):
    """A 1-round segmentation run with cross-site evaluation: site-1's and site-2's policies let their final local
    models leave, site-3's keeps its own; every site scores the global model and the two local ones on its test
    case. The global column equals the test task's scores of the same model and a plain brats-evaluation of the
    run's best model on the same cases; each site's scores of a model are the mean of the rows it kept for it."""
    federation = running_federation.federation
    configs = {site: federation.kit(site) / "local" / "site_agent.json" for site in SITES}
    restore_after(configs.values())
    for site in ("site-1", "site-2"):
        edit_policy(federation, site, share_local_model=True)
    params = SegmentationParams(num_rounds=1, min_clients=3, cross_site_evaluation=True, tracking=False, **CPU_DEMO)
    for site in SITES:  # each site's test cases, as the job splits them, copied to a folder of their own
        config = SiteConfig.load(configs[site])
        folder = config.data_dir("brats", site)
        for case in split_cases(folder, params.case_recipe()).test:
            shutil.copytree(case.images[0].parent, tmp_path / site / "test-cases" / case.case_id)
        write_site_config(federation.kit(site), {**config.datasets, "brats_test": str(tmp_path / site / "test-cases")})
    session = running_federation.session()
    try:
        outcome = submit_and_wait(session, export(build_job(SEGMENTATION, params), tmp_path / "run"), timeout=600)
        assert outcome.completed, outcome.refusal()
        serve_model(federation, "cross-run", outcome.server_app_dir())
        evaluation = submit_and_wait(session, export(build_job(EVALUATION, EvaluationParams(
            model="cross-run", dataset="brats_test", min_clients=3, **ARCHITECTURE)), tmp_path / "eval"), timeout=300)
    finally:
        session.close()

    results = outcome.results()
    cross = results["cross_site"]
    assert cross["models"] == ["global", "site-1", "site-2"] and sorted(cross["sites"]) == SITES
    assert cross["withheld"] == {"site-3": "the site's policy keeps its local model (share_local_model is false)"}
    assert {site: row["global"] for site, row in cross["sites"].items()} == results["test"]["sites"]
    assert evaluation.completed, evaluation.refusal()
    plain = evaluation.results()["sites"]
    for site in SITES:
        for key in ("dice_mean", "dice_tc", "hd95_mean", "lesion_dice_wt"):
            assert plain[site][f"eval_{key}"] == pytest.approx(cross["sites"][site]["global"][f"test_{key}"],
                                                               abs=1e-6), (site, key)
    dice = cross["matrix"]["test_dice_mean"]
    assert all(set(dice[site]) == {"global", "site-1", "site-2"} for site in SITES)
    assert dice["site-1"]["site-1"] != dice["site-1"]["site-2"]  # two models, not one sent twice
    for site in SITES:
        with case_results_path(federation.kit(site), outcome.job_id).open() as stream:
            rows = [r for r in csv.DictReader(stream) if r["task"].startswith("cross_validate")]
        for model in cross["models"]:
            scored = [float(r["wt_dice"]) for r in rows if r["task"] == f"cross_validate {model}"]
            assert scored and cross["sites"][site][model]["test_dice_wt"] == pytest.approx(sum(scored) / len(scored))
    sent = [e for e in AuditLog(federation.kit("site-1") / "local").entries(outcome.job_id)
            if e["event"] == RESULT_SENT and e.get("task") == "local_model"]
    assert [e.get("local_model") for e in sent] == ["sent for cross-site evaluation (share_local_model)"]
    assert segmentation_report.main([str(outcome.result_dir), "--out", str(tmp_path / "report")]) == 0
    table = (tmp_path / "report" / "dice.md").read_text()
    assert "| site | global | site-1 | site-2 |" in table and f"| site-3 | {dice['site-3']['global']:.3f} |" in table
    assert "site-3's model not scored: the site's policy keeps" in table
    assert Image.open(tmp_path / "report" / "cross_site.png").size[0] > 300
    assert evaluation_cli.main([str(outcome.result_dir), "--out", str(tmp_path / "page")]) == 0
    page = (tmp_path / "page" / "cross_site.html").read_text()
    assert f"{dice['site-3']['site-1']:.3f}" in page and "share_local_model is false" in page

