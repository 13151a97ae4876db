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
