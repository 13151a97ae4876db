"""The FedAvg site task: one local round from the global weights, and exactly the documented message leaves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel
from nvflare.app_common.utils.fl_model_utils import FLModelUtils

from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from site_agent.data.demo.linear_demo import generate_linear_sites, write_linear_site
from site_agent.data.readers.reader import DataError
from site_agent.kit.site_config import SiteConfig, write_site_config
from site_agent.tasks.executor import SiteContext


def _context(tmp_path: Path, site_index: int) -> SiteContext:
    data = write_linear_site(tmp_path / "data", site_index).parent
    config = SiteConfig.load(write_site_config(tmp_path, {"linear": str(data)}))
    return SiteContext(f"site-{site_index}", config, torch.device("cpu"), tmp_path, Signal())


def test_local_round_matches_the_reference_gradient_steps(tmp_path):
    x, y = (torch.from_numpy(a) for a in generate_linear_sites()[1])
    w = torch.tensor([0.5, -0.5])
    for _ in range(5):
        w = w - 0.1 * 2 * x.T @ (x @ w - y) / len(y)

    result = _task().task_train(FLModel(params={"weight": np.array([[0.5, -0.5]], np.float32)}), _context(tmp_path, 2))

    np.testing.assert_allclose(result.params["weight"].ravel(), w.numpy(), rtol=1e-5)
    assert result.meta[FLMetaKey.NUM_STEPS_CURRENT_ROUND] == 200


def test_message_carries_only_weights_sample_count_and_loss(tmp_path):
    result = _task().task_train(FLModel(params={"weight": np.zeros((1, 2), np.float32)}), _context(tmp_path, 1))

    shareable = FLModelUtils.to_shareable(result)
    sent = FLModelUtils.from_shareable(shareable)

    assert {k: v.shape for k, v in sent.params.items()} == {"weight": (1, 2)}
    assert all(v.dtype == np.float32 for v in sent.params.values())
    assert set(sent.meta) - {"initial_metrics"} == {FLMetaKey.NUM_STEPS_CURRENT_ROUND}
    assert sent.meta["initial_metrics"] == sent.metrics  # FLARE repeats the metrics in the meta
    assert set(sent.metrics) == {"train_mse"}


def test_missing_data_names_the_folder_and_the_fix(tmp_path):
    config = SiteConfig.load(write_site_config(tmp_path, {"linear": str(tmp_path)}))
    ctx = SiteContext("site-1", config, torch.device("cpu"), tmp_path, Signal())

    with pytest.raises(DataError, match="linear.npz: no linear-regression data here.*site-agent demo-data linear"):
        _task().task_train(FLModel(params={"weight": np.zeros((1, 2), np.float32)}), ctx)


def _task():
    """The site task exactly as a default fedavg-linear job configures it."""
    return KIND.site_task_component(FedAvgLinearParams()).instantiate()
