"""`fl-eval-report` on an isic-evaluation result and on a run's cross-site evaluation: the pages show every number
the sites sent and nothing they kept, escape what a site or a results.json says, fetch nothing, and render in
headless Chromium. The records are made by the server's own code (the controller's recorder, the cross-site
record) from the sites' own release functions; the brats-evaluation page is driven end to end on the provisioned
federation (tests/federation/test_provisioned_federation.py)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from nvflare.app_common.abstract.fl_model import FLModel
from PIL import Image
from support import screenshot

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.evaluation import CONFUSION, GLOBAL_MODEL, WITHHELD
from fl_contract.segmentation import DICE, HD95, LESION_DICE, LESION_HD95, MEAN, metric_key
from reports import segmentation as segmentation_report
from reports.evaluation_cli import main
from server_app.cross_site import cross_site_record
from server_app.evaluation import IsicEvaluationController
from server_app.results import RESULTS_FILE, RunRecorder
from site_agent.classification.evaluation_release import isic_release

HOSTILE = "<script>alert(1)</script> ../../etc/passwd"
"""What a site could put in its words (a withheld reason): shown as text, never as markup."""


def _isic_result(tmp_path: Path) -> dict:
    """An isic-evaluation's results.json from three sites' releases (site-3 with few images of two classes)."""
    rng = np.random.default_rng(0)
    answers = []
    for site, images in (("site-1", 60), ("site-2", 40), ("site-3", 12)):
        truth = rng.integers(0, len(PLAYERFL_CLASSES), images)
        predicted = np.where(rng.random(images) < 0.6, truth, rng.integers(0, len(PLAYERFL_CLASSES), images))
        metrics, meta = isic_release(truth, predicted, PLAYERFL_CLASSES, min_cases=5)
        if site == "site-2":
            meta[WITHHELD] = {**meta.get(WITHHELD, {}), "note": HOSTILE}
        answers.append(FLModel(metrics=metrics, meta={**meta, "client_name": site}))
    controller = IsicEvaluationController(kind="isic-evaluation", params={"model": "isic-1"})
    recorder = RunRecorder(tmp_path / "run", {"workflow": controller.WORKFLOW})
    controller.record_sites(recorder, answers)
    recorder.record["model_identity"] = {"path": "/models/isic-1/global_model.pt", "sha256": "ab" * 32,
                                         "model": "cnn5", "image_size": 200}
    recorder.finish("finished", no_result=[])
    return json.loads((tmp_path / "run" / RESULTS_FILE).read_text())


def _fetches_nothing(page: str) -> bool:
    linked = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)', page)
    return bool(linked) and all(v.startswith("data:") for v in linked) and "url(" not in page


def _rendered(page: Path, tmp_path: Path) -> np.ndarray:
    shot = np.asarray(Image.open(screenshot(page, tmp_path / "shot.png")))
    assert shot.shape[:2] == (1000, 1200) and shot.std() > 10  # a rendered page, not a blank one
    return shot


def test_the_isic_page_shows_each_sites_scores_and_the_cells_it_kept_escaped_and_self_contained(tmp_path):
    results = _isic_result(tmp_path)
    assert main([str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    table = json.loads((tmp_path / "report" / "evaluation.json").read_text())
    page = (tmp_path / "report" / "evaluation.html").read_text()
    for site, metrics in results["sites"].items():
        row = table["sites"][site]
        assert row["balanced_accuracy"] == metrics["eval_balanced_accuracy"] and row["images"] == metrics["eval_images"]
        assert f"{metrics['eval_balanced_accuracy']:.3f}" in page and f"{metrics['eval_macro_f1']:.3f}" in page
        for name in PLAYERFL_CLASSES:
            assert row["recall"][name] == metrics.get(f"eval_recall_{name.lower()}")
    kept = [n for row in results[CONFUSION]["site-3"]["counts"] for n in row if n is None]
    assert kept and page.count("<small>kept</small>") >= len(kept)  # the cells site-3 kept are empty, not numbers
    assert table["confusion"]["site-3"] == results[CONFUSION]["site-3"]
    assert html.escape("fewer than the policy's min_cases=5") in page and table["federation"]["images"] == 112
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; ../../etc/passwd" in page
    assert _fetches_nothing(page)
    _rendered(tmp_path / "report" / "evaluation.html", tmp_path)


def _cross_site_result(tmp_path: Path) -> Path:
    """A segmentation run's results.json with a 3 sites x 3 models matrix (site-3's model kept at home)."""
    rng = np.random.default_rng(1)
    models = [GLOBAL_MODEL, "site-1", "site-2"]
    sites = {site: {model: {metric_key("test", metric, MEAN): float(rng.uniform(0.1, 0.9) * scale)
                            for metric, scale in ((DICE, 1), (HD95, 30), (LESION_DICE, 1), (LESION_HD95, 40))}
                    for model in models} for site in ("site-1", "site-2", "site-3")}
    record = cross_site_record("test", models, sites, {"site-3": HOSTILE}, ["site-1", "site-2", "site-3"])
    path = tmp_path / "run" / RESULTS_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"job": {"workflow": "fedavg", "label_map": "brats2023"}, "status": "finished",
                                "rounds": [{"round": 1}], "cross_site": record}))
    return path


def test_the_cross_site_page_holds_every_matrix_number_and_names_the_model_kept_at_its_site(tmp_path):
    path = _cross_site_result(tmp_path)
    assert main([str(path), "--out", str(tmp_path / "report")]) == 0
    record = json.loads(path.read_text())["cross_site"]
    page = (tmp_path / "report" / "cross_site.html").read_text()
    table = json.loads((tmp_path / "report" / "cross_site.json").read_text())
    for metric, digits in ((DICE, 3), (HD95, 1), (LESION_DICE, 3), (LESION_HD95, 1)):
        key = metric_key("test", metric, MEAN)
        assert table["matrix"][key] == record["matrix"][key]
        for row in record["matrix"][key].values():
            assert all(f"{value:.{digits}f}" in page for value in row.values())
    assert "&lt;script&gt;" in page and "<script>" not in page and _fetches_nothing(page)
    assert (tmp_path / "report" / "cross_site.png").read_bytes().startswith(b"\x89PNG")
    _rendered(tmp_path / "report" / "cross_site.html", tmp_path)


def test_each_report_command_names_the_other_for_a_result_it_does_not_render(tmp_path):
    _isic_result(tmp_path)
    with pytest.raises(SystemExit, match="fl-eval-report"):
        segmentation_report.main([str(tmp_path / "run"), "--out", str(tmp_path / "out")])
    training = tmp_path / "plain" / RESULTS_FILE
    training.parent.mkdir()
    training.write_text(json.dumps({"job": {"workflow": "fedavg"}, "status": "finished", "rounds": []}))
    with pytest.raises(SystemExit, match="--cross-site-evaluation"):
        main([str(training), "--out", str(tmp_path / "out")])
