"""The release's covariance shrinkage: a class keeps its own covariance where its difference from the pooled one
stands above the noise and takes the pooled one where noise explains it, the shrunk estimate is closer to the truth
when noise dominates, and the diagnostics state the noise of what is released."""

import numpy as np
import pytest

from fl_contract.fedkt_csd.wire import ClassStatistics, upper_triangle
from server_app.fedkt_release import (
    class_gaussians,
    effective_counts,
    expected_noise_trace,
    own_covariance_weights,
    release_class_gaussians,
    toward_pooled,
)
from server_app.privacy.dp_calibration import calibrate_noise


def _noise(dim, std_outer, count, rng):
    """The outer products' noise over `count`: symmetric, std std_outer / count on the diagonal, / sqrt(2) off it."""
    upper = np.triu(rng.normal(0.0, std_outer / np.sqrt(2), (dim, dim)), 1)
    return (upper + upper.T + np.diag(rng.normal(0.0, std_outer, dim))) / count


def shrink_covariances(covariances, counts, std_outer, estimate="shrunk"):
    weights = own_covariance_weights(covariances, counts, std_outer, estimate)
    return toward_pooled(covariances, counts, weights), weights


def _truth(classes=4, dim=16, spread=1.0, seed=0):
    """Class covariances: one shared structure plus a class-specific part of size `spread`."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(dim, dim))
    own = rng.normal(size=(classes, dim, dim)) * spread
    return np.stack([shared @ shared.T / dim + o @ o.T / dim for o in own])


def test_without_noise_or_with_one_class_every_class_keeps_its_own_covariance():
    truth, counts = _truth(), np.array([50.0, 80.0, 120.0, 30.0])

    shrunk, weights = shrink_covariances(truth, counts, std_outer=0.0)
    alone, alone_weight = shrink_covariances(truth[:1], counts[:1], std_outer=1e6)

    np.testing.assert_array_equal(weights, 1.0)
    np.testing.assert_array_equal(shrunk, truth)
    np.testing.assert_array_equal(alone_weight, 1.0)
    np.testing.assert_array_equal(alone, truth[:1])


def test_where_classes_share_one_covariance_each_weight_mixes_its_own_and_the_pooled_noise_optimally():
    """With identical true covariances both C_c and P estimate it; w C_c + (1 - w) P has error variance
    w^2 / n_c^2 + (1 - w)^2 K / N^2 + 2 w (1 - w) / (n_c N), least at the w below (0 for a small class, whose own
    estimate is far noisier than the pool; about 0.35 for the largest, whose own noise is close to the pool's)."""
    truth, counts = np.repeat(_truth(classes=1), 4, axis=0), np.array([50.0, 80.0, 120.0, 30.0])
    total, k = counts.sum(), len(counts)
    least = (k / total**2 - 1 / (total * counts)) / ((1 / counts - 1 / total) ** 2 + (k - 1) / total**2)
    rng = np.random.default_rng(1)
    weights = []
    for _ in range(20):
        noisy = np.stack([c + _noise(16, 500.0, n, rng) for c, n in zip(truth, counts)])
        weights.append(shrink_covariances(noisy, counts, std_outer=500.0)[1])

    np.testing.assert_allclose(np.mean(weights, axis=0), np.clip(least, 0.0, 1.0), atol=0.08)
    assert least[3] < 0 and least[2] > 0.3


def test_a_class_whose_covariance_stands_out_keeps_it():
    truth, counts = _truth(spread=0.2), np.array([200.0, 200.0, 200.0, 200.0])
    truth[0] = truth[0] * 20.0  # far more spread than the others, far above the noise (and so then are they)
    rng = np.random.default_rng(2)
    noisy = np.stack([c + _noise(16, 50.0, n, rng) for c, n in zip(truth, counts)])

    _, weights = shrink_covariances(noisy, counts, std_outer=50.0)

    assert weights[0] > 0.95


@pytest.mark.parametrize("std_outer, lower", [(300.0, True), (1.0, False)])
def test_shrinkage_is_closer_to_the_truth_where_noise_dominates_and_harmless_where_not(std_outer, lower):
    truth, counts = _truth(), np.array([40.0, 60.0, 100.0, 25.0])
    rng = np.random.default_rng(3)
    own_error, shrunk_error = [], []
    for _ in range(40):
        noisy = np.stack([c + _noise(16, std_outer, n, rng) for c, n in zip(truth, counts)])
        shrunk, _ = shrink_covariances(noisy, counts, std_outer)
        own_error.append(np.sum(np.square(noisy - truth)))
        shrunk_error.append(np.sum(np.square(shrunk - truth)))

    ratio = np.mean(shrunk_error) / np.mean(own_error)
    if lower:
        assert ratio < 0.6
    else:
        assert ratio == pytest.approx(1.0, abs=0.01)


def test_the_shrunk_weight_is_near_the_one_that_minimises_the_error():
    truth, counts = _truth(spread=0.5), np.array([40.0, 60.0, 100.0, 25.0])
    rng = np.random.default_rng(7)
    grid = np.linspace(0.0, 1.0, 21)
    grid_error, chosen_error = np.zeros((len(grid), 4)), np.zeros(4)
    for _ in range(60):
        noisy = np.stack([c + _noise(16, 60.0, n, rng) for c, n in zip(truth, counts)])
        shrunk, _ = shrink_covariances(noisy, counts, 60.0)
        chosen_error += np.sum(np.square(shrunk - truth), axis=(1, 2))
        for g, w in enumerate(grid):
            grid_error[g] += np.sum(np.square(toward_pooled(noisy, counts, np.full(4, w)) - truth), axis=(1, 2))

    best, per_class = grid_error.min(axis=0), grid_error[-1]
    assert np.all(grid_error.argmin(axis=0) < len(grid) - 1)  # noise enough that some shrinkage pays
    assert np.all(chosen_error <= 1.1 * best)
    assert np.all(chosen_error < per_class)


def test_per_class_keeps_every_class_and_pooled_gives_every_class_the_pooled_covariance():
    truth, counts = _truth(), np.array([50.0, 80.0, 120.0, 30.0])

    own, own_weights = shrink_covariances(truth, counts, 10.0, "per_class")
    pooled, pooled_weights = shrink_covariances(truth, counts, 10.0, "pooled")

    np.testing.assert_array_equal(own, truth)
    np.testing.assert_array_equal(own_weights, 1.0)
    np.testing.assert_array_equal(pooled_weights, 0.0)
    expected = np.einsum("k,kij->ij", counts / counts.sum(), truth)
    np.testing.assert_allclose(pooled, np.broadcast_to(expected, pooled.shape))


def test_effective_count_gives_the_noise_of_the_shrunk_covariance():
    counts, weights = np.array([20.0, 60.0, 200.0]), np.array([0.0, 0.4, 1.0])
    rng = np.random.default_rng(4)
    diagonals = []
    for _ in range(3000):
        noise = np.stack([_noise(4, 1.0, n, rng) for n in counts])
        pooled = np.einsum("k,kij->ij", counts / counts.sum(), noise)
        diagonals.append([w * c[0, 0] + (1 - w) * pooled[0, 0] for w, c in zip(weights, noise)])

    np.testing.assert_allclose(np.std(diagonals, axis=0), 1.0 / effective_counts(counts, weights), rtol=0.05)
    assert effective_counts(counts, weights)[2] == pytest.approx(200.0)


def _stats(counts, dim=8, seed=5):
    """Noise-free statistics of classes with their own means and spreads, `counts` records each."""
    rng = np.random.default_rng(seed)
    sums, outers = [], []
    for k, n in enumerate(counts):
        latents = rng.normal(k, 1.0 + k, (n, dim))
        sums.append(latents.sum(axis=0))
        outers.append(latents.T @ latents)
    return ClassStatistics(np.array(sums), upper_triangle(np.stack(outers)), np.array(counts, dtype=float))


def test_the_release_states_its_estimate_and_each_class_weight_and_its_noise_is_smaller_shrunk():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=10.0)
    stats = _stats([15, 400, 400])
    releases = {name: release_class_gaussians(stats, calibration, noise_seed=6, min_count=10.0, covariance=name,
                                              class_names=["A", "B", "C"])
                for name in ("per_class", "shrunk")}

    for name, release in releases.items():
        assert release.manifest["covariance_estimate"] == name
        for covariance in release.gaussians.covariances:
            np.linalg.cholesky(covariance)
    own = releases["per_class"].manifest["diagnostics"]
    shrunk = releases["shrunk"].manifest["diagnostics"]
    assert [own[c]["own_covariance_weight"] for c in "ABC"] == [1.0, 1.0, 1.0]
    assert 0.0 <= shrunk["A"]["own_covariance_weight"] < 1.0
    assert shrunk["A"]["expected_noise_trace"] < own["A"]["expected_noise_trace"]
    weight = releases["shrunk"].gaussians.own_weight[0]
    gaussians = releases["shrunk"].gaussians
    noise_count = effective_counts(gaussians.counts, gaussians.own_weight)[0]
    assert shrunk["A"]["expected_noise_trace"] == pytest.approx(expected_noise_trace(calibration.std_outer,
                                                                                     noise_count, 8))
    assert weight == shrunk["A"]["own_covariance_weight"]


def test_an_unknown_covariance_estimate_is_refused_by_name():
    with pytest.raises(ValueError, match="'tied' is not one of shrunk, per_class, pooled"):
        class_gaussians(_stats([20, 20]), 0.0, min_count=10.0, covariance="tied")
