"""Server release: noise calibrated as documented, bias-corrected PSD covariances, seeded sampling, decoding."""

import json

import numpy as np
import pytest
import torch

from fl_contract.fedkt.wire import ClassStatistics, from_ring, upper_triangle
from fl_contract.models.dcae import build_tiny_dcae
from server_app.fedkt_release import (
    add_noise,
    class_gaussians,
    decode_latents,
    project_psd,
    release_class_gaussians,
    sample_latents,
)
from server_app.privacy.dp_calibration import NoiseCalibration, calibrate_noise
from site_agent.fedkt.stats import class_statistics


def _calibration(std_mean, std_outer, std_count=None):
    """A hand-made calibration with multiplier 1, so that the stds equal the sensitivities."""
    return NoiseCalibration(1.0, 1e-5, 1.0, "add_remove", "analytic", 3, 1.0, std_mean, std_outer, std_count, 1.0)


def _stats(num_classes=3, dim=4, n=200, seed=0):
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(n, dim, generator=generator) + 1.0
    return from_ring(class_statistics(latents, torch.arange(n) % num_classes, num_classes, 10.0), num_classes, 10.0)


def test_psd_projection_gives_a_valid_covariance():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(20, 20))
    indefinite = (a + a.T) / 2

    projected = project_psd(indefinite, floor=1e-4)

    np.testing.assert_array_equal(projected, projected.T)
    assert np.linalg.eigvalsh(projected).min() >= 1e-4 * (1 - 1e-6)
    np.linalg.cholesky(projected)
    np.testing.assert_allclose(project_psd(projected, floor=1e-4), projected, atol=1e-10)


def test_bias_correction_on_a_known_case():
    noisy = ClassStatistics(np.array([[4.0, 8.0]]), upper_triangle(np.array([[[8.0, 10.0], [10.0, 20.0]]])),
                            np.array([4.0]))

    gaussians = class_gaussians(noisy, std_mean=2.0, min_count=2.0)

    # mu = (1, 2); S/n - mu mu^T = [[1, 0.5], [0.5, 1]]; + (2 / 4)^2 I
    np.testing.assert_allclose(gaussians.means, [[1.0, 2.0]])
    np.testing.assert_allclose(gaussians.covariances, [[[1.25, 0.5], [0.5, 1.25]]])


def test_bias_correction_makes_the_covariance_unbiased_under_mean_noise():
    latents = torch.randn(10, 2, generator=torch.Generator().manual_seed(0)) * 5.0
    stats = from_ring(class_statistics(latents, torch.zeros(10, dtype=torch.long), 1, clip_norm=100.0), 1, 100.0)
    exact = class_gaussians(stats, std_mean=0.0, min_count=2.0).covariances[0]
    calibration = _calibration(std_mean=5.0, std_outer=1e-6)  # (std_mean / n)^2 = 0.25

    estimates = np.stack([class_gaussians(add_noise(stats, calibration, seed), 5.0, min_count=2.0).covariances[0]
                          for seed in range(4000)])

    np.testing.assert_allclose(estimates.mean(axis=0), exact, atol=0.06)
    assert np.diag(estimates.mean(axis=0) - exact - 0.25).max() < -0.15  # without the correction: biased by 0.25


def test_outer_noise_is_calibrated_to_the_frobenius_norm():
    dim = 40
    stats = ClassStatistics(np.zeros((1, dim)), np.zeros((1, dim * (dim + 1) // 2)), np.ones(1))
    diagonal = np.zeros((dim, dim), dtype=bool)
    np.fill_diagonal(diagonal, True)
    on_diagonal = upper_triangle(diagonal)

    noise = np.concatenate([add_noise(stats, _calibration(0.0, 3.0), seed).outer_upper for seed in range(50)])

    assert noise[:, on_diagonal].std() == pytest.approx(3.0, rel=0.05)
    assert noise[:, ~on_diagonal].std() == pytest.approx(3.0 / np.sqrt(2), rel=0.02)


def test_release_is_deterministic_by_seed_and_withholds_small_classes():
    stats = _stats(num_classes=3)
    stats = ClassStatistics(stats.sums, stats.outer_upper, np.array([stats.counts[0], stats.counts[1], 0.0]))
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=10.0, adjacency="add_remove")

    first = release_class_gaussians(stats, calibration, noise_seed=7, min_count=2.0)
    second = release_class_gaussians(stats, calibration, noise_seed=7, min_count=2.0)
    other = release_class_gaussians(stats, calibration, noise_seed=8, min_count=2.0)

    np.testing.assert_array_equal(first.noisy.to_flat(), second.noisy.to_flat())
    assert not np.array_equal(first.noisy.to_flat(), other.noisy.to_flat())
    assert first.manifest["released_classes"] == [0, 1] and first.manifest["withheld_classes"] == [2]
    assert first.manifest["counts_noised"] is True
    for gaussian_covariance in first.gaussians.covariances:
        np.linalg.cholesky(gaussian_covariance)


def test_manifest_records_the_numbers_but_not_the_noise_seed():
    calibration = calibrate_noise(10.0, 1e-5, clip_norm=10.0, adjacency="replace_one")

    release = release_class_gaussians(_stats(), calibration, noise_seed=12345, min_count=2.0)

    manifest = release.manifest
    assert manifest["epsilon"] == 10.0 and manifest["adjacency"] == "replace_one"
    assert manifest["std_mean"] == pytest.approx(calibration.noise_multiplier * 20.0)
    assert manifest["counts_noised"] is False
    assert manifest["counts_used"] == release.gaussians.counts.tolist()
    assert "12345" not in json.dumps(manifest)


def test_sampling_is_seeded_and_follows_the_class_gaussian():
    stats = _stats(num_classes=2, n=400)
    gaussians = class_gaussians(stats, std_mean=0.0, min_count=2.0)

    latents, labels = sample_latents(gaussians, [3000, 10], seed=3)
    again, _ = sample_latents(gaussians, [3000, 10], seed=3)

    np.testing.assert_array_equal(latents, again)
    np.testing.assert_array_equal(np.bincount(labels), [3000, 10])
    np.testing.assert_allclose(latents[labels == 0].mean(axis=0), gaussians.means[0], atol=0.1)
    np.testing.assert_allclose(np.cov(latents[labels == 0].T), gaussians.covariances[0], atol=0.15)


def test_decoded_synthetic_images_lie_in_zero_one():
    model = build_tiny_dcae(seed=0).eval()
    latents = np.random.default_rng(0).normal(size=(3, 128)) * 5

    images = decode_latents(model, latents, image_size=64, batch_size=2)

    assert images.shape == (3, 3, 64, 64)
    assert images.min() >= 0.0 and images.max() <= 1.0
