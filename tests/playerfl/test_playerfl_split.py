"""The server's split rule: normalised, sample-weighted curves, the first jump decides p, the last layer stays local."""

import numpy as np
import pytest
import torch

from fl_contract.models import build_model
from server_app.playerfl_split import (
    SplitInputs,
    choose_split,
    combine_curves,
    normalise_curve,
    sensitivity_ratios,
    split_over_thresholds,
    threshold_split,
)
from site_agent.playerfl.sensitivity import federation_sensitivity
from site_agent.playerfl.training import focal_loss

# Importance 1, 1, 1, then a layer 20x more sensitive: ratios 2, 1.5, 7.67, ... -> federate the first 3 layers.
JUMP_CURVE = np.cumsum([1.0, 1.0, 1.0, 20.0, 30.0, 40.0]).tolist()


def test_curve_with_a_jump_federates_the_layers_before_it():
    p = choose_split(JUMP_CURVE, threshold=3.0)

    assert p == 3


def test_split_is_stable_over_a_grid_of_thresholds():
    thresholds = [2.5, 3.0, 4.0, 5.0, 7.0]

    splits = split_over_thresholds(JUMP_CURVE, thresholds)

    assert set(splits.values()) == {3}


def test_low_threshold_stops_at_the_first_increase():
    assert choose_split(JUMP_CURVE, threshold=1.8) == 1


def test_flat_curve_keeps_only_the_last_layer_local():
    flat = np.cumsum([5.0, 0.1, 0.1, 0.1]).tolist()

    assert choose_split(flat, threshold=1.5) == 3


@pytest.mark.parametrize("curve", [[1.0, 1.0], [0.0, 0.0, 0.0], np.cumsum([1.0] * 10).tolist()])
def test_last_layer_always_stays_local(curve):
    for t in (1.01, 1.5, 100.0):
        assert 1 <= choose_split(curve, t) <= len(curve) - 1


def test_step_from_zero_counts_as_a_jump():
    assert sensitivity_ratios([0.0, 0.0, 2.0]).tolist() == [1.0, np.inf]
    assert choose_split([0.0, 0.0, 2.0, 2.1], threshold=2.0) == 2


def test_sites_are_combined_weighted_by_samples():
    curves = {"site-1": [1.0, 2.0], "site-2": [4.0, 8.0]}

    combined = combine_curves(curves, {"site-1": 3, "site-2": 1})

    np.testing.assert_allclose(combined, [1.75, 3.5])


def test_curves_of_different_length_are_refused():
    with pytest.raises(ValueError, match="different lengths"):
        combine_curves({"site-1": [1.0, 2.0], "site-2": [1.0]}, {"site-1": 1, "site-2": 1})


def test_threshold_must_exceed_one():
    with pytest.raises(ValueError, match="exceed 1"):
        choose_split(JUMP_CURVE, threshold=1.0)


def test_normalised_curves_end_at_one_or_start_at_one():
    curve = [2.0, 4.0, 8.0]

    assert normalise_curve(curve, "total").tolist() == [0.25, 0.5, 1.0]
    assert normalise_curve(curve, "first_layer").tolist() == [1.0, 2.0, 4.0]
    assert normalise_curve([0.0, 0.0], "total").tolist() == [0.0, 0.0]


# Three sites whose curves jump at layer 3 (federate 2 layers), and one large site, 10,000 times their scale, whose
# curve grows smoothly. Averaging the raw curves lets the large site decide; its own shape says "federate 5 layers".
EARLY_JUMP = np.cumsum([1.0, 0.2, 6.0, 1.0, 1.0, 1.0]).tolist()
SMOOTH_LARGE = (1e4 * np.cumsum([1.0, 0.3, 0.3, 0.3, 0.3, 3.0])).tolist()
SITES = {"site-1": EARLY_JUMP, "site-2": EARLY_JUMP, "site-3": EARLY_JUMP, "site-4": SMOOTH_LARGE}
SAMPLES = {"site-1": 100, "site-2": 100, "site-3": 100, "site-4": 100}


def _record(normalisation: str) -> dict:
    curves = {s: {"cumulative": c, "importance": np.diff([0.0, *c]).tolist()} for s, c in SITES.items()}
    inputs = SplitInputs([f"l{i}" for i in range(6)], curves, SAMPLES, threshold=2.0, seed=0,
                         normalisation=normalisation)
    return threshold_split(inputs, lambda message: None)


@pytest.mark.parametrize("normalisation", ["total", "first_layer"])
def test_where_most_sites_say_split_early_normalised_curves_move_p_there(normalisation):
    raw = choose_split(combine_curves(SITES, SAMPLES), threshold=2.0)

    record = _record(normalisation)

    assert raw == 5  # the raw mean follows the large site
    assert record["federated_layers"] == 2
    assert record["site_splits"] == {"site-1": 2, "site-2": 2, "site-3": 2, "site-4": 5}
    assert record["normalisation"] == normalisation


def _inputs(curves, normalisation="total", samples=None):
    records = {s: {"cumulative": list(c), "importance": np.diff([0.0, *c]).tolist()} for s, c in curves.items()}
    return SplitInputs([f"l{i}" for i in range(6)], records, samples or dict.fromkeys(curves, 100), threshold=2.0,
                       seed=0, normalisation=normalisation)


def test_a_site_whose_curve_is_all_zero_is_left_out_and_named():
    """Averaged in, the one-class site's zero curve would shrink the federation's curve to 2/11 of its height
    (the site holds 900 of 1100 samples) and be listed with its own p = 5 (L - 1, from ratios that are all 1)."""
    curves = {"site-1": EARLY_JUMP, "site-2": EARLY_JUMP, "site-3": [0.0] * 6}
    samples = {"site-1": 100, "site-2": 100, "site-3": 900}
    log: list[str] = []

    record = threshold_split(_inputs(curves, samples=samples), log.append)

    assert choose_split([0.0] * 6, 2.0) == 5
    assert record["federated_layers"] == 2 and record["federation_curve"][-1] == pytest.approx(1.0)
    assert set(record["excluded_sites"]) == {"site-3"} and "all zero" in record["excluded_sites"]["site-3"]
    assert record["site_splits"] == {"site-1": 2, "site-2": 2}
    assert set(record["site_normalised_curves"]) == {"site-1", "site-2"} and "site-3" in record["site_curves"]
    assert any("site-3's sensitivity curve is left out" in line for line in log)


def test_non_finite_and_unscalable_curves_are_left_out_with_their_reason():
    curves = {"site-1": EARLY_JUMP, "site-2": [1.0, 2.0, np.inf, np.inf, np.inf, np.inf],
              "site-3": [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]}

    by_total = threshold_split(_inputs(curves, "total"), lambda message: None)
    by_first = threshold_split(_inputs(curves, "first_layer"), lambda message: None)

    assert by_total["excluded_sites"] == {"site-2": "non-finite sensitivity values"}
    assert by_total["site_curves"]["site-2"] == [1.0, 2.0, None, None, None, None]
    assert set(by_first["excluded_sites"]) == {"site-2", "site-3"}
    assert "first_layer normalisation" in by_first["excluded_sites"]["site-3"]


def test_with_no_usable_curve_the_split_keeps_round_one_and_warns():
    record = threshold_split(_inputs({"site-1": [0.0] * 6, "site-2": [0.0] * 6}), lambda message: None)

    assert record["federated_layers"] == 5 and record["federation_curve"] is None
    assert "no site sent a usable sensitivity curve" in record["warning"]
    assert set(record["excluded_sites"]) == {"site-1", "site-2"}


def test_a_one_class_site_whose_loss_saturates_sends_a_zero_curve_that_the_split_leaves_out():
    """The site's own sensitivity pass on a one-class training batch whose logits already favour that class by 200
    (softmax 1.0 in float32, focal loss 0, gradient exactly 0), then the server's rule."""
    torch.manual_seed(0)
    model = build_model("cnn5", num_classes=4, channels=[4, 8, 16, 32, 64], hidden=32)
    with torch.no_grad():
        model.fc2.bias.copy_(torch.tensor([200.0, 0.0, 0.0, 0.0]))
    saturated = federation_sensitivity(model, focal_loss(1.0, [1.0, 0.0, 0.0, 0.0]), torch.rand(8, 3, 16, 16),
                                       torch.zeros(8, dtype=torch.long))
    curves = {"site-1": EARLY_JUMP + [8.0], "site-2": saturated.cumulative}
    inputs = SplitInputs(saturated.layers, {s: {"cumulative": c, "importance": np.diff([0.0, *c]).tolist()}
                                            for s, c in curves.items()}, {"site-1": 50, "site-2": 50}, 2.0, 0)

    record = threshold_split(inputs, lambda message: None)

    assert saturated.cumulative == [0.0] * 7
    assert list(record["excluded_sites"]) == ["site-2"] and record["site_splits"] == {"site-1": 2}
