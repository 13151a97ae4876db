"""Server side of the segmentation job: best-model selection, and a job that ships no code and passes the
allow-lists."""

from __future__ import annotations

import numpy as np
import pytest
from support import JOB_FILES, read_exported_job

from jobs.common import build_job, export
from jobs.registry import server_allow_list, site_allow_list
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from server_app.selection import BestModel, site_weighted_mean


def test_selection_metric_is_weighted_by_the_sites_validation_cases():
    metrics = {"a": {"dice": 0.9, "n": 1.0}, "b": {"dice": 0.3, "n": 3.0}}

    assert site_weighted_mean(metrics, "dice", "n") == pytest.approx(0.45)
    assert site_weighted_mean(metrics, "dice") == pytest.approx(0.6)


def test_selection_names_sites_missing_the_metric():
    with pytest.raises(ValueError, match=r"sites \['b'\] did not report 'dice'"):
        site_weighted_mean({"a": {"dice": 0.5}, "b": {"loss": 1.0}}, "dice")


def test_best_model_keeps_the_highest_scoring_round_and_its_weights():
    best = BestModel("dice")
    rounds = [({"w": np.zeros(1)}, 0.2), ({"w": np.ones(1)}, 0.7), ({"w": np.full(1, 2.0)}, 0.5)]

    records = [best.observe(r, params, {"site": {"dice": value}}) for r, (params, value) in enumerate(rounds)]

    assert [r["model_round"] for r in records] == [0, 1, 2]
    assert best.summary() == {"metric": "dice", "weight": None, "value": 0.7, "model_round": 1}
    np.testing.assert_array_equal(best.params["w"], np.ones(1))


def test_exported_job_ships_no_code_and_every_class_is_allow_listed(tmp_path):
    params = SegmentationParams(num_rounds=2, aggregation="median", dp_clip_norm=1.0, dp_noise_multiplier=0.1,
                                **CPU_DEMO)
    job_dir = export(build_job(KIND, params), tmp_path)

    job = read_exported_job(job_dir)
    client, server = job.client, job.server

    assert job.files == JOB_FILES
    assert set(job.site_classes()) <= set(site_allow_list()) and set(job.server_classes()) <= set(server_allow_list())
    assert client["executors"][0]["tasks"] == ["*"]  # train and validate
    executor_params = client["executors"][0]["executor"]["args"]["params"]
    assert executor_params | {"dp_clip_norm": 1.0, "dp_noise_multiplier": 0.1} == executor_params
    assert server["workflows"][0]["args"]["params"]["aggregation"] == "median"


@pytest.mark.parametrize("roi_size, message", [((30, 32, 32), "multiple of 4"), ((32, 32), "give 3 sizes")])
def test_job_refuses_roi_sizes_the_network_cannot_tile(roi_size, message):
    with pytest.raises(ValueError, match=message):
        build_job(KIND, SegmentationParams(**{**CPU_DEMO, "roi_size": roi_size}))
