"""FedKT-CSD server release: secure-aggregated statistics -> DP noise -> class Gaussians -> synthetic latents.

Everything after `add_noise` is post-processing of the noisy statistics and costs no privacy. Seeds: the noise
seed must stay secret (anyone who knows it can subtract the noise), so it never enters the manifest, and None
draws it from the operating system; the sampling seed may be public.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from diffusers import AutoencoderDC

from server_app.privacy.dp_calibration import NoiseCalibration
from fl_contract.fedkt.wire import ClassStatistics, full_matrix
from fl_contract.models.dcae import AutoencoderIdentity, from_autoencoder_range, latent_shape

EIGENVALUE_FLOOR = 1e-4
_NOISE_STREAM, _SAMPLE_STREAM = 0, 1


@dataclass(frozen=True)
class ClassGaussians:
    """N(mean, covariance) per released class; classes whose noisy count fell below the minimum are withheld."""

    classes: np.ndarray  # (K,) class indices
    means: np.ndarray  # (K, d)
    covariances: np.ndarray  # (K, d, d), symmetric positive definite
    counts: np.ndarray  # (K,) the (noisy) counts the estimates divide by


@dataclass(frozen=True)
class Release:
    noisy: ClassStatistics  # the DP statistics themselves, safe to export
    gaussians: ClassGaussians
    manifest: dict[str, Any]


def add_noise(stats: ClassStatistics, calibration: NoiseCalibration, seed: int | None) -> ClassStatistics:
    """The Gaussian mechanism on the aggregated sums (and counts under add/remove adjacency).

    Off-diagonal entries of the outer-product sums are scaled by sqrt(2) before the noise and back after, so that
    the noise is calibrated to the Frobenius norm of the full symmetric matrix, whose sensitivity the
    calibration states (R^2 under add/remove adjacency).
    """
    rng = np.random.default_rng(None if seed is None else (seed, _NOISE_STREAM))
    rows, cols = np.triu_indices(stats.dim)
    frobenius = np.where(rows == cols, 1.0, np.sqrt(2.0))
    sums = stats.sums + rng.normal(0.0, calibration.std_mean, stats.sums.shape)
    outer = stats.outer_upper * frobenius + rng.normal(0.0, calibration.std_outer, stats.outer_upper.shape)
    counts = stats.counts
    if calibration.std_count is not None:
        counts = counts + rng.normal(0.0, calibration.std_count, counts.shape)
    return ClassStatistics(sums, outer / frobenius, counts)


def project_psd(matrix: np.ndarray, floor: float = EIGENVALUE_FLOOR) -> np.ndarray:
    """Nearest symmetric matrix (in Frobenius norm, up to the floor) with every eigenvalue >= `floor`."""
    eigenvalues, eigenvectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    projected = (eigenvectors * np.maximum(eigenvalues, floor)) @ eigenvectors.T
    return (projected + projected.T) / 2.0


def class_gaussians(noisy: ClassStatistics, std_mean: float, *, min_count: float,
                    floor: float = EIGENVALUE_FLOOR) -> ClassGaussians:
    """mu = S_mu / n; Sigma = S_Sigma / n - mu mu^T + (std_mean / n)^2 I, projected to eigenvalues >= floor.

    The correction term: the noisy mean is mu + e with e ~ N(0, (std_mean / n)^2 I), so E[mu_noisy mu_noisy^T] =
    mu mu^T + (std_mean / n)^2 I; subtracting mu_noisy mu_noisy^T takes that much too much off, and we add it back.
    """
    classes = np.flatnonzero(noisy.counts >= min_count)
    if classes.size == 0:
        raise ValueError(f"no class has a noisy count >= {min_count}; nothing can be released")
    counts = noisy.counts[classes]
    means = noisy.sums[classes] / counts[:, None]
    second = full_matrix(noisy.outer_upper[classes], noisy.dim) / counts[:, None, None]
    correction = (std_mean / counts)[:, None, None] ** 2 * np.eye(noisy.dim)
    covariances = second - means[:, :, None] * means[:, None, :] + correction
    return ClassGaussians(classes, means, np.stack([project_psd(c, floor) for c in covariances]), counts)


def release_class_gaussians(stats: ClassStatistics, calibration: NoiseCalibration, noise_seed: int | None, *,
                            min_count: float, floor: float = EIGENVALUE_FLOOR,
                            autoencoder: AutoencoderIdentity | None = None) -> Release:
    """Noise the aggregated statistics, estimate the class Gaussians, and write the manifest."""
    noisy = add_noise(stats, calibration, noise_seed)
    gaussians = class_gaussians(noisy, calibration.std_mean, min_count=min_count, floor=floor)
    manifest = {
        **calibration.manifest(),
        "counts_noised": calibration.std_count is not None,
        "bias_correction": "covariance += (std_mean / n)^2 I",
        "eigenvalue_floor": floor,
        "min_count": min_count,
        "num_classes": stats.num_classes,
        "released_classes": gaussians.classes.tolist(),
        "withheld_classes": sorted(set(range(stats.num_classes)) - set(gaussians.classes.tolist())),
        "counts_used": gaussians.counts.tolist(),
        "noise_seed": "secret, not recorded",
        "autoencoder": None if autoencoder is None else autoencoder.manifest(),
    }
    return Release(noisy, gaussians, manifest)


def sample_latents(gaussians: ClassGaussians, samples_per_class: Sequence[int],
                   seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw `samples_per_class[k]` latents from released class k via Cholesky; returns (latents, class labels)."""
    if len(samples_per_class) != len(gaussians.classes):
        raise ValueError(f"{len(samples_per_class)} sample counts for {len(gaussians.classes)} released classes")
    rng = np.random.default_rng((seed, _SAMPLE_STREAM))
    latents, labels = [], []
    for label, mean, covariance, count in zip(gaussians.classes, gaussians.means, gaussians.covariances,
                                              samples_per_class):
        cholesky = np.linalg.cholesky(covariance)
        latents.append(mean + rng.standard_normal((count, mean.size)) @ cholesky.T)
        labels.append(np.full(count, label))
    return np.concatenate(latents), np.concatenate(labels)


def decode_latents(model: AutoencoderDC, latents: np.ndarray, image_size: int, batch_size: int = 64) -> torch.Tensor:
    """(N, d) latents -> (N, 3, image_size, image_size) images in [0, 1] via `model.decode(z).sample`."""
    device = next(model.parameters()).device
    z = torch.as_tensor(latents, dtype=torch.float32).reshape(-1, *latent_shape(model, image_size))
    with torch.inference_mode():
        decoded = [model.decode(batch.to(device)).sample.cpu() for batch in z.split(batch_size)]
    return from_autoencoder_range(torch.cat(decoded))
