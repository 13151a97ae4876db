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
    assert base64.b64decode(report.plot_png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r["round"] for r in report.rounds] == [1, 2] and ("num_rounds", "2") in report.params
    assert report.progress is not None
    assert report.progress.curves["val_dice_mean"] == pytest.approx([0.15, 0.4])  # round 1: the mean of a and b


def test_no_report_for_a_path_a_bad_id_or_a_job_not_downloaded(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    _download(tmp_path / "outside", "x", {"rounds": []})
    for job_id in ("../outside/x", "..", str(uuid.uuid4()), "x"):
        assert results_path(tmp_path, job_id) is None
        assert job_report(tmp_path, job_id, "fedavg-linear") is None
