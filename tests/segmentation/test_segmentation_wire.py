"""What a segmentation site sends and what it keeps: per-site means and counts leave, each case's row stays; the
test cases are scored only by the test task."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.evaluation import WITHHELD
from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.segmentation import TEST, TRAIN_LOSS, VAL, split_metric_keys
from jobs.segmentation.spec import CPU_DEMO, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.kit.site_config import SiteConfig
from site_agent.privacy.policy import SitePolicy
from site_agent.segmentation.metrics import case_columns, case_results_path
from site_agent.tasks.executor import SiteContext


@pytest.fixture
def site(tmp_path):
    cases = write_brats_site(tmp_path / "brats", 1, n_cases=4, shape=(16, 16, 16), layout="nifti")
    params = SegmentationParams(**{**CPU_DEMO, "roi_size": (16, 16, 16)}, tracking=False)
    task = KIND.site_task_component(params).instantiate()
    ctx = SiteContext("site-1", SiteConfig(tmp_path / "site_agent.json", {"brats": str(tmp_path / "brats")}),
                      torch.device("cpu"), tmp_path / "workspace", Signal(), job_id="job-7")
    torch.manual_seed(0)
    model = FLModel(params=state_dict_to_numpy(build_model("segresnet", **task.model_args)),
                    params_type=ParamsType.FULL, current_round=0, total_rounds=1)
    return task, ctx, model, [c.case_id for c in cases]


def test_a_round_sends_means_and_counts_and_keeps_one_row_per_case_at_the_site(site):
    task, ctx, model, case_ids = site

    sent = task.task_train(model, ctx)
    final = task.task_validate(FLModel(params=sent.params, current_round=1, total_rounds=1), ctx)
    test = task.task_test(FLModel(params=sent.params, current_round=1, total_rounds=1), ctx)

    assert set(test.metrics) <= set(split_metric_keys(TEST)) and test.metrics["test_cases"] == 1
    for result in (sent, final, test):
        assert set(result.metrics) - {TRAIN_LOSS} <= set(split_metric_keys(VAL)) | set(split_metric_keys(TEST))
        assert not any(case_id in repr(result.metrics) + repr(result.meta) for case_id in case_ids)
    with case_results_path(ctx.workspace_dir, "job-7").open() as stream:
        rows = list(csv.DictReader(stream))
    val_cases = int(sent.metrics["val_cases"])
    assert [(r["model_round"], r["task"], r["split"]) for r in rows] == [("0", "train", "val")] * val_cases + \
        [("1", "validate", "val")] * val_cases + [("1", "test", "test")]
    assert {r["case_id"] for r in rows} < set(case_ids) and rows[-1]["case_id"] not in {r["case_id"] for r in rows[:-1]}
    first = rows[:val_cases]
    assert sent.metrics["val_dice_tc"] == pytest.approx(sum(float(r["tc_dice"]) for r in first) / val_cases)
    assert list(rows[0]) == ["model_round", "task", "split", "case_id", *case_columns()]
    assert case_results_path(ctx.workspace_dir, "job-7").stat().st_mode & 0o777 == 0o600


def test_a_site_sends_its_local_model_for_cross_site_evaluation_only_as_its_policy_and_the_job_allow(site, tmp_path):
    task, ctx, model, _ = site
    assert "site_policy.json: not found" in task.task_local_model(model, ctx).meta["withheld"]  # no policy: kept
    (tmp_path / "site_policy.json").write_text(json.dumps(SitePolicy(share_local_model=True).to_json()))
    assert "trained in no round" in task.task_local_model(model, ctx).meta["withheld"]

    trained = task.task_train(model, ctx)
    sent = task.task_local_model(model, ctx)

    assert sent.metrics == {"local_model_sent": 1.0} and WITHHELD not in (sent.meta or {})
    assert all(np.array_equal(sent.params[k], trained.params[k]) for k in trained.params)  # no DP: what it sent
    dp = KIND.site_task_component(SegmentationParams(**{**CPU_DEMO, "roi_size": (16, 16, 16)}, tracking=False,
                                                     dp_clip_norm=0.1, dp_noise_multiplier=1.0)).instantiate()
    dp.task_train(model, ctx)
    assert "client-side DP" in dp.task_local_model(model, ctx).meta["withheld"]
