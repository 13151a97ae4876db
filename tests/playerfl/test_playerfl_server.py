"""Server side without FLARE: partial aggregation, update checks, federation metrics and the report's statistics."""

import numpy as np
import pytest
from torch import nn

from fl_contract.playerfl.layers import model_layers
from reports.playerfl.table import median_spread
from server_app.aggregation import SiteUpdate, UpdateRejected
from server_app.metrics import federation_summary, incentivisation
from server_app.playerfl import aggregate_layers, check_curve, check_layers

LAYERS = model_layers(nn.Sequential(nn.Linear(1, 1), nn.Linear(1, 1)))
GLOBAL = {"0.weight": np.zeros((1, 1), np.float32), "0.bias": np.zeros(1, np.float32),
          "1.weight": np.zeros((1, 1), np.float32), "1.bias": np.zeros(1, np.float32)}


def _update(site: str, value: float, n: int, keys=tuple(GLOBAL)) -> SiteUpdate:
    return SiteUpdate(site, {k: np.full_like(GLOBAL[k], value) for k in keys}, n)


def test_prefix_is_averaged_by_samples_and_the_suffix_is_not_touched():
    updates = [_update("site-1", 1.0, 1, ("0.weight", "0.bias")), _update("site-2", 5.0, 3, ("0.weight", "0.bias"))]

    result = aggregate_layers(updates, LAYERS[:1], GLOBAL)

    assert sorted(result) == ["0.bias", "0.weight"]
    np.testing.assert_allclose(result["0.weight"], [[4.0]])


def test_fedlp_layers_are_averaged_over_the_sites_that_sent_them():
    updates = [_update("site-1", 2.0, 1), _update("site-2", 6.0, 1, ("0.weight", "0.bias"))]

    result = aggregate_layers(updates, LAYERS, GLOBAL)

    np.testing.assert_allclose(result["0.weight"], [[4.0]])
    np.testing.assert_allclose(result["1.weight"], [[2.0]])


def test_update_with_a_local_layer_is_refused_naming_the_site():
    with pytest.raises(UpdateRejected, match="site-2.*outside the 1 federated layers: \\['1.bias', '1.weight'\\]"):
        check_layers(_update("site-2", 1.0, 1), GLOBAL, LAYERS[:1], partial=False)


def test_fedlp_update_with_half_a_layer_is_refused():
    with pytest.raises(UpdateRejected, match="missing \\['0.bias'\\]"):
        check_layers(_update("site-1", 1.0, 1, ("0.weight",)), GLOBAL, LAYERS, partial=True)


def test_curve_for_another_model_is_refused():
    with pytest.raises(UpdateRejected, match="does not name the model's 2 layers"):
        check_curve("site-3", {"layers": ["a"], "cumulative": [1.0]}, LAYERS)
    with pytest.raises(UpdateRejected, match="non-decreasing"):
        check_curve("site-3", {"layers": ["0", "1"], "cumulative": [2.0, 1.0]}, LAYERS)


def test_a_masked_jobs_curve_carrying_the_sites_size_is_refused_and_one_without_it_passes():
    curve = {"layers": ["0", "1"], "cumulative": [1.0, 2.0]}
    check_curve("site-3", curve, LAYERS, masked=True)
    with pytest.raises(UpdateRejected, match="in the clear"):
        check_curve("site-3", {**curve, "num_samples": 15}, LAYERS, masked=True)
    with pytest.raises(UpdateRejected, match="as its number of training samples"):
        check_curve("site-3", curve, LAYERS)


def test_a_masked_federation_score_is_the_plain_mean_over_sites():
    per_site = {"a": {"test_macro_f1": 0.2, "test_balanced_accuracy": 0.5},
                "b": {"test_macro_f1": 0.6, "test_balanced_accuracy": 0.5}}

    assert federation_summary(per_site, weighted=False)["test_macro_f1"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="num_train"):
        federation_summary(per_site)


def test_federation_score_is_weighted_by_training_size_and_fairness_is_the_variance():
    per_site = {"a": {"test_macro_f1": 0.2, "test_balanced_accuracy": 0.5, "num_train": 30},
                "b": {"test_macro_f1": 0.6, "test_balanced_accuracy": 0.5, "num_train": 10}}

    summary = federation_summary(per_site)

    assert summary["test_macro_f1"] == pytest.approx(0.3)
    assert summary["test_macro_f1_variance"] == pytest.approx(0.04)
    assert summary["test_balanced_accuracy_variance"] == 0.0


def test_incentivisation_counts_sites_strictly_better_than_both_baselines():
    share = incentivisation({"a": 0.5, "b": 0.5, "c": 0.9}, {"a": 0.4, "b": 0.5, "c": 0.1},
                            {"a": 0.3, "b": 0.2, "c": 0.95})

    assert share == pytest.approx(1 / 3)


def test_median_comes_with_the_lowest_and_highest_seed():
    assert median_spread([0.4, 0.1, 0.9, 0.3, 0.2]) == (0.3, 0.1, 0.9)
    assert median_spread([0.7]) == (0.7, 0.7, 0.7)

