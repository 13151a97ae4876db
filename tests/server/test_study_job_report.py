"""The study page's report of a finished job (`/jobs/JOB_ID`), from a download in the admin kit: found only for a
job id, with the kind's plot, the rounds and the curves; nothing for a path or a job not downloaded."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from federation_tools.status.job_report import job_report, results_path
from tests.segmentation.test_segmentation_report import RESULTS


def _download(downloads: Path, job_id: str, results: dict) -> None:
    folder = downloads / job_id / "workspace" / "app_server"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(results))


def test_a_downloaded_segmentation_job_reports_its_dice_plot_rounds_and_curves(tmp_path: Path) -> None:
    job_id = str(uuid.uuid4())
    _download(tmp_path, job_id, {**RESULTS, "status": "finished", "job": {"params": {"num_rounds": 2, "lr": 0.1}}})

    report = job_report(tmp_path, job_id, "brats-segmentation")

    assert report is not None and report.status == "finished"
    assert [caption for caption, _ in report.figures] == ["validation dice"]  # no cross-site matrix in this run
    assert base64.b64decode(report.figures[0][1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r["round"] for r in report.rounds] == [1, 2] and ("num_rounds", "2") in report.params
    assert report.progress is not None
    assert report.progress.curves["val_dice_mean"] == pytest.approx([0.15, 0.4])  # round 1: the mean of a and b


def test_no_report_for_a_path_a_bad_id_or_a_job_not_downloaded(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    _download(tmp_path / "outside", "x", {"rounds": []})
    for job_id in ("../outside/x", "..", str(uuid.uuid4()), "x"):
        assert results_path(tmp_path, job_id) is None
        assert job_report(tmp_path, job_id, "fedavg-linear") is None


def test_a_playerfl_job_reports_its_sensitivity_curve(tmp_path: Path) -> None:
    split = {"rule": "threshold", "threshold": 2.0, "normalisation": "total", "layers": ["a", "b", "c"],
             "federated_layers": 1, "federation_curve": [0.2, 0.3, 1.0], "site_splits": {"a": 1},
             "site_normalised_curves": {"a": [0.2, 0.3, 1.0]}, "site_curves": {"a": [2.0, 3.0, 10.0]}}
    evaluation = {"a": {"test_macro_f1": 0.5, "test_balanced_accuracy": 0.5, "num_train": 10}}
    job_id = str(uuid.uuid4())
    _download(tmp_path, job_id, {"job": {"workflow": "playerfl", "method": "playerfl", "seed": 0}, "status": "finished",
                                 "rounds": [{"round": 1, "split": split, "outcomes": {"a": "update accepted"}}],
                                 "evaluation": evaluation, "summary": {}})

    report = job_report(tmp_path, job_id, "playerfl")

    assert report is not None and [caption for caption, _ in report.figures] == ["layer sensitivity"]


def test_a_fedkt_csd_job_reports_the_grids_of_its_released_classes(tmp_path: Path) -> None:
    from PIL import Image

    from server_app.fedkt_outputs import GRID_DIR

    job_id = str(uuid.uuid4())
    _download(tmp_path, job_id, {"job": {}, "status": "finished", "rounds": []})
    grids = tmp_path / job_id / "workspace" / "app_server" / GRID_DIR
    grids.mkdir()
    for name in ("MEL", "NV"):
        Image.new("RGB", (8, 8), (200, 10, 10)).save(grids / f"{name}.png")

    report = job_report(tmp_path, job_id, "fedkt-csd")

    assert report is not None and [caption for caption, _ in report.figures] == ["MEL", "NV"]


FEDKT_RESULTS = {
    "job": {"workflow": "fedkt_csd", "epsilon": 10.0}, "status": "finished", "rounds": [],
    "evaluation": {"site-2": {"accuracy": 0.5, "balanced_accuracy": 0.5, "num_test": 30.0, "predicted_classes": 1.0,
                              "recall": {"MEL": 1.0, "NV": 0.0}},
                   "site-1": {"accuracy": 1.0, "balanced_accuracy": 1.0, "num_test": 10.0, "predicted_classes": 2.0,
                              "recall": {"BCC": 1.0, "MEL": 1.0}}},
    "latent_evaluation": {"site-1": {"accuracy": 1.0, "balanced_accuracy": 1.0, "num_test": 10.0,
                                     "predicted_classes": 2.0, "recall": {"BCC": 1.0, "MEL": 1.0}},
                          "site-2": {"accuracy": 0.9, "balanced_accuracy": 0.75, "num_test": 30.0,
                                     "predicted_classes": 2.0, "recall": {"MEL": 1.0, "NV": 0.5}}}}


def test_a_fedkt_csd_job_reports_both_models_of_its_evaluation_round_per_site(tmp_path: Path) -> None:
    job_id = str(uuid.uuid4())
    _download(tmp_path, job_id, FEDKT_RESULTS)

    report = job_report(tmp_path, job_id, "fedkt-csd")

    assert report is not None
    cnn, latents = report.scores
    assert "synthetic set" in cnn.caption and "Gaussians" in latents.caption
    assert cnn.classes == ["BCC", "MEL", "NV"]  # every class some site holds; a site without one shows none
    assert cnn.rows == [("site-1", 10, 1.0, [1.0, 1.0, None]), ("site-2", 30, 0.5, [None, 1.0, 0.0])]
    assert cnn.weighted == pytest.approx(0.625) and latents.weighted == pytest.approx(0.8125)  # weights 10 and 30
    assert job_report(tmp_path, job_id, "playerfl").scores == []  # another kind's results are not read as these
    broken = str(uuid.uuid4())
    _download(tmp_path, broken, {**FEDKT_RESULTS, "evaluation": {"site-1": {"recall": {}}}})  # no scores in it
    report = job_report(tmp_path, broken, "fedkt-csd")
    assert report is not None and report.status == "finished" and report.scores == []  # the rest of the page shows


def test_the_study_lead_sees_the_fedkt_csd_scores_in_the_browser(tmp_path: Path) -> None:
    """The page as `fl-job status --serve` serves it, in headless Chromium: both tables, a class lost at a site
    marked, and a screenshot."""
    import threading

    from selenium.webdriver.common.by import By
    from support import browser, non_blank

    from federation_tools.status.job_report import add_job_reports
    from federation_tools.status.metrics import study_metrics
    from federation_tools.status.snapshot import JobRow, StudyStatus
    from fl_runtime.status_server import bind, page_url, status_app

    job_id = str(uuid.uuid4())
    _download(tmp_path, job_id, FEDKT_RESULTS)
    status = StudyStatus("localhost", "started", "", "", [], [JobRow(job_id, "fedkt-csd", "fedkt-csd",
                                                                     "FINISHED:COMPLETED", "admin@cc.org", "", "",
                                                                     ["site-1", "site-2"], downloaded=True)])
    app = status_app("federation_tools.status", "study_status.html", lambda: status, StudyStatus.to_json,
                     study_metrics, "token")
    add_job_reports(app, lambda: status, tmp_path)
    server = bind(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with browser() as driver:
            driver.get(page_url(server, "token"))
            driver.find_element(By.CSS_SELECTOR, f'a[href="/jobs/{job_id}"]').click()
            body = driver.find_element(By.TAG_NAME, "body").text
            lost = [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "td.fail")]
            assert driver.save_screenshot(str(tmp_path / "fedkt-job.png"))
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert "Scores on the sites' held-out images" in body and "classifier trained on the synthetic set" in body
    assert "the released class Gaussians as a classifier" in body and "site-weighted" in body
    assert "recall NV" in body and "0.625" in body and "0.812" in body
    assert lost == ["0.00"]  # site-2's NV under the synthetic-set classifier
    assert non_blank(tmp_path / "fedkt-job.png")
