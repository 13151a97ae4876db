"""FedKT-CSD server release: secure-aggregated statistics -> DP noise -> class Gaussians -> synthetic latents.

Everything after `add_noise` is post-processing of the noisy statistics and costs no privacy. Seeds: the noise
seed must stay secret (anyone who knows it can subtract the noise), so it never enters the manifest, and None
draws it from the operating system; the sampling seed may be public.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from diffusers import AutoencoderDC

from fl_contract.fedkt_csd import COVARIANCE_ESTIMATES
from fl_contract.fedkt_csd.wire import ClassStatistics, full_matrix
from fl_contract.models.dcae import AutoencoderIdentity, from_autoencoder_range, latent_shape
from server_app.privacy.dp_calibration import NoiseCalibration
from server_app.privacy.noisy_counts import inverse_count_estimator, inverse_counts

EIGENVALUE_FLOOR = 1e-4
USEFUL_MEAN_NOISE_TO_SIGNAL = 0.1  # the mean's noise a tenth of its length: class means land where the class is
USEFUL_COVARIANCE_NOISE_TO_SIGNAL = 1.0  # beyond this the sampled spread is mostly noise
_NOISE_STREAM, _SAMPLE_STREAM = 0, 1


@dataclass(frozen=True)
class ClassGaussians:
    """N(mean, covariance) per released class; classes whose noisy count fell below the minimum are withheld."""

    classes: np.ndarray  # (K,) class indices
    means: np.ndarray  # (K, d)
    covariances: np.ndarray  # (K, d, d), symmetric positive definite
    counts: np.ndarray  # (K,) the (noisy) counts the estimates divide by
    own_weight: np.ndarray  # (K,) weight of the class's own covariance estimate beside the pooled one (1: its own)


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
    symmetric: np.ndarray = (projected + projected.T) / 2.0
    return symmetric


def class_gaussians(noisy: ClassStatistics, std_mean: float, *, min_count: float, std_count: float | None = None,
                    floor: float = EIGENVALUE_FLOOR, covariance: str = "per_class",
                    std_outer: float = 0.0) -> ClassGaussians:
    """The classes whose noisy count is at least `min_count`: their `moment_estimates`, each covariance moved toward
    the classes' pooled one as `covariance` says ("per_class", "shrunk" or "pooled": `own_covariance_weights`, with
    the outer products' noise std `std_outer`), then projected to eigenvalues >= floor.

    `std_count`: the count noise std (None: the counts are exact, public or noise-free).
    """
    classes = np.flatnonzero(noisy.counts >= min_count)
    if classes.size == 0:
        raise ValueError(f"no class has a noisy count >= {min_count}; nothing can be released")
    counts, means, covariances = moment_estimates(noisy, classes, std_mean, std_count=std_count, min_count=min_count)
    own_weight = own_covariance_weights(covariances, counts, std_outer, covariance)
    covariances = toward_pooled(covariances, counts, own_weight)
    return ClassGaussians(classes, means, np.stack([project_psd(c, floor) for c in covariances]), counts, own_weight)


def own_covariance_weights(covariances: np.ndarray, counts: np.ndarray, std_outer: float,
                           estimate: str) -> np.ndarray:
    """Per class, the weight w_c of its own covariance estimate C_c in the released w_c C_c + (1 - w_c) P, P the
    classes' pooled covariance sum_k n_k C_k / N (`toward_pooled`): 1 for "per_class" (the paper's), 0 for "pooled"
    (one covariance shared by every class, as in linear discriminant analysis), and for "shrunk" as much as the noise
    calls for.

    At a useful epsilon most class covariances are mostly noise (release_diagnostics), while the pooled one averages
    the noise of every class. The "shrunk" weight minimises the expected squared (Frobenius) error of the released
    covariance, as in James-Stein and Ledoit-Wolf shrinkage, from released numbers only (post-processing). The
    noise of C_k is the outer products' noise over n_k (s = std_outer), of squared norm s^2 F / n_k^2 in expectation
    (F = d (d + 1) / 2), independent between classes; P carries a share n_c / N of C_c's noise. Minimising
    E||w C_c + (1 - w) P - Sigma_c||^2 over w gives w_c = 1 - s^2 F (1/n_c) (1/n_c - 1/N) / E||C_c - P||^2, and the
    released ||C_c - P||^2 stands in for its expectation; clipped to [0, 1]. A class whose difference from the pool
    stands well above the noise keeps its own covariance (w near 1); one whose difference the noise explains gets
    the pooled covariance (w = 0). One class, or no noise, keeps its own.
    """
    if estimate not in COVARIANCE_ESTIMATES:
        raise ValueError(f"covariance estimate {estimate!r} is not one of {', '.join(COVARIANCE_ESTIMATES)}")
    k, dim = len(counts), covariances.shape[-1]
    if estimate == "per_class" or k == 1:
        return np.ones(k)
    if estimate == "pooled":
        return np.zeros(k)
    weights = np.ones(k)
    total = float(counts.sum())
    pooled = pooled_covariance(covariances, counts)
    for c in range(k if std_outer > 0 else 0):
        noise = std_outer**2 * (1.0 / counts[c]) * (1.0 / counts[c] - 1.0 / total) * dim * (dim + 1) / 2
        difference = float(np.sum(np.square(covariances[c] - pooled)))
        weights[c] = min(1.0, max(0.0, 1.0 - noise / difference)) if difference > 0 else 0.0
    return weights


def pooled_covariance(covariances: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """P = sum_k n_k C_k / N, the classes' pooled covariance."""
    pooled: np.ndarray = np.tensordot(counts / counts.sum(), covariances, axes=1)
    return pooled


def toward_pooled(covariances: np.ndarray, counts: np.ndarray, own_weight: np.ndarray) -> np.ndarray:
    """w_c C_c + (1 - w_c) P per class, P the classes' `pooled_covariance`."""
    pooled = pooled_covariance(covariances, counts)
    shrunk: np.ndarray = own_weight[:, None, None] * covariances + (1.0 - own_weight[:, None, None]) * pooled
    return shrunk


def moment_estimates(noisy: ClassStatistics, classes: np.ndarray, std_mean: float, *, std_count: float | None,
                     min_count: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, means, covariances) of `classes`: mu = S_mu h_1(n);
    Sigma = S_Sigma h_1(n) - (S_mu S_mu^T - std_mean^2 I) h_2(n).

    h_1, h_2 estimate 1/n and 1/n^2 from the released count n (`inverse_counts`: 1/n and 1/n^2 for exact counts;
    for noisy ones, estimators that are unbiased given that n reached `min_count`). The noisy sum is S_mu + e with
    e ~ N(0, std_mean^2 I) independent of the count, so S_mu S_mu^T - std_mean^2 I is unbiased for the noise-free
    outer product of the sum; every term is then unbiased. For exact counts this is the textbook S_Sigma / n - mu
    mu^T + (std_mean / n)^2 I. The covariances are symmetric but not yet positive definite.
    """
    counts = noisy.counts[classes]
    inverse, inverse_square = inverse_counts(counts, std_count, min_count)
    sums = noisy.sums[classes]
    second = full_matrix(noisy.outer_upper[classes], noisy.dim) * inverse[:, None, None]
    sum_outer = sums[:, :, None] * sums[:, None, :] - std_mean**2 * np.eye(noisy.dim)
    return counts, sums * inverse[:, None], second - sum_outer * inverse_square[:, None, None]


def release_class_gaussians(stats: ClassStatistics, calibration: NoiseCalibration, noise_seed: int | None, *,
                            min_count: float, covariance: str, floor: float = EIGENVALUE_FLOOR,
                            autoencoder: AutoencoderIdentity | None = None,
                            class_names: Sequence[str] | None = None) -> Release:
    """Noise the aggregated statistics, estimate the class Gaussians (`covariance`: "shrunk", "per_class" or
    "pooled", see `class_gaussians`), and write the manifest with its diagnostics."""
    noisy = add_noise(stats, calibration, noise_seed)
    gaussians = class_gaussians(noisy, calibration.std_mean, min_count=min_count, std_count=calibration.std_count,
                                floor=floor, covariance=covariance, std_outer=calibration.std_outer)
    names = [str(c) for c in range(stats.num_classes)] if class_names is None else list(class_names)
    diagnostics = release_diagnostics(noisy, gaussians, calibration, names, min_count)
    manifest = {
        **calibration.manifest(),
        "counts_noised": calibration.std_count is not None,
        "bias_correction": bias_correction(calibration.std_mean, calibration.std_count, min_count),
        "covariance_estimate": covariance,
        "eigenvalue_floor": floor,
        "min_count": min_count,
        "num_classes": stats.num_classes,
        "released_classes": gaussians.classes.tolist(),
        "withheld_classes": sorted(set(range(stats.num_classes)) - set(gaussians.classes.tolist())),
        "counts_used": gaussians.counts.tolist(),
        "noise_seed": "secret, not recorded",
        "autoencoder": None if autoencoder is None else autoencoder.manifest(),
        "useful_release": {"mean_noise_to_signal": USEFUL_MEAN_NOISE_TO_SIGNAL,
                           "covariance_noise_to_signal": USEFUL_COVARIANCE_NOISE_TO_SIGNAL},
        "diagnostics": diagnostics,
        "warnings": [d["warning"] for d in diagnostics.values() if d["warning"]],
    }
    return Release(noisy, gaussians, manifest)


def expected_noise_trace(std_outer: float, count: float, dim: int) -> float:
    """E[trace of the PSD part of the outer-product noise / n]: the released trace that noise alone would give.

    That noise is a symmetric matrix with entries of std std_outer / n (diagonal) and std_outer / (n sqrt(2)) (off
    the diagonal), a Gaussian orthogonal ensemble; its eigenvalues fill Wigner's semicircle of radius
    2 s sqrt(d) with s = std_outer / (n sqrt(2)), whose positive half sums to 4 s d^(3/2) / (3 pi) (within 0.3% of a
    simulation at d = 128). Clamping the eigenvalues at the floor keeps that positive half.
    """
    return 4.0 * std_outer / (count * math.sqrt(2.0)) * dim * math.sqrt(dim) / (3.0 * math.pi)


def effective_counts(counts: np.ndarray, own_weight: np.ndarray) -> np.ndarray:
    """Per class, the count whose plain estimate would carry the noise of its (shrunk) covariance:
    w C_c + (1 - w) P has noise entries of std s sqrt((w / n_c + (1 - w) / N)^2 + (K - 1) (1 - w)^2 / N^2)
    (`own_covariance_weights`), s / n_c for w = 1."""
    total, k = float(counts.sum()), len(counts)
    per_entry = np.sqrt((own_weight / counts + (1.0 - own_weight) / total) ** 2
                        + (k - 1) * (1.0 - own_weight) ** 2 / total**2)
    result: np.ndarray = 1.0 / per_entry
    return result


def bias_correction(std_mean: float, std_count: float | None, min_count: float) -> dict[str, Any]:
    """The manifest's statement of the estimator and, for noisy counts, its residual bias given release."""
    estimators = None if std_count is None else {
        name: inverse_count_estimator(power, std_count, min_count).manifest() for power, name in ((1, "1/n"),
                                                                                               (2, "1/n^2"))}
    return {"mean": "S_mu h_1(n)", "covariance": "S_Sigma h_1(n) - (S_mu S_mu^T - std_mean^2 I) h_2(n)",
            "std_mean": std_mean, "h": "1/n, 1/n^2 (exact counts)" if estimators is None else estimators}


def release_diagnostics(noisy: ClassStatistics, gaussians: ClassGaussians, calibration: NoiseCalibration,
                        class_names: Sequence[str], min_count: float) -> dict[str, dict[str, Any]]:
    """Per class, how much of the release is noise, from the released numbers only (post-processing, no cost).

    The noise-free statistics are not available to the server, so each ratio compares the RMS norm of the noise,
    which the calibration fixes, with the released norm less that noise's expected share (E||x + e||^2 = ||x||^2 +
    E||e||^2): mean_noise_to_signal is std_mean sqrt(d) / n over sqrt(||mu||^2 - d std_mean^2 / n^2);
    covariance_noise_to_signal is std_outer sqrt(d (d+1) / 2) / n over the same for the Frobenius norm of the
    bias-corrected covariance before the PSD projection. None: noise alone explains the released norm. Both ratios
    fall as 1 / n, so records_for_useful_* is the class size at which each would reach its USEFUL_* threshold at this
    epsilon. trace_noise_fraction: `expected_noise_trace` (what noise alone would add to the released, projected
    covariance's trace) over that trace; trace_inflation = 1 / (1 - fraction) estimates released / noise-free trace
    (None when noise alone explains it), on the high side when noise dominates (25x measured where it says 36x).
    For shrunk covariances the noise is that of the shrunk estimate (`effective_counts`), and own_covariance_weight
    says how much of the class's own covariance estimate the release kept (`own_covariance_weights`); the two ratios
    describe the class's own statistics either way.
    """
    dim = noisy.dim
    released = {int(c): k for k, c in enumerate(gaussians.classes)}
    noise_counts = effective_counts(gaussians.counts, gaussians.own_weight)
    _, means, covariances = moment_estimates(noisy, gaussians.classes, calibration.std_mean,
                                             std_count=calibration.std_count, min_count=min_count)
    out: dict[str, dict[str, Any]] = {}
    for c, name in enumerate(class_names):
        count = float(noisy.counts[c])
        entry: dict[str, Any] = {"records": round(count, 2), "released": c in released, "warning": None}
        out[name] = entry
        if c not in released:
            entry["warning"] = f"class {name} withheld: noisy count {count:.1f} is below min_count"
            continue
        k = released[c]
        mean_ratio = _noise_to_signal(calibration.std_mean * math.sqrt(dim) / count, means[k])
        covariance_ratio = _noise_to_signal(calibration.std_outer * math.sqrt(dim * (dim + 1) / 2) / count,
                                            covariances[k])
        trace = float(np.trace(gaussians.covariances[k]))
        noise_trace = expected_noise_trace(calibration.std_outer, noise_counts[k], dim)
        share = noise_trace / trace
        needed = {key: None if ratio is None else math.ceil(count * ratio / threshold)
                  for key, ratio, threshold in (("mean", mean_ratio, USEFUL_MEAN_NOISE_TO_SIGNAL),
                                                ("covariance", covariance_ratio, USEFUL_COVARIANCE_NOISE_TO_SIGNAL))}
        entry.update({"own_covariance_weight": float(gaussians.own_weight[k]), "mean_noise_to_signal": mean_ratio,
                      "covariance_noise_to_signal": covariance_ratio,
                      "released_trace": trace, "expected_noise_trace": noise_trace, "trace_noise_fraction": share,
                      "trace_inflation": 1.0 / (1.0 - share) if share < 1.0 else None,
                      "records_for_useful_mean": needed["mean"],
                      "records_for_useful_covariance": needed["covariance"]})
        if not (_below(mean_ratio, USEFUL_MEAN_NOISE_TO_SIGNAL)
                and _below(covariance_ratio, USEFUL_COVARIANCE_NOISE_TO_SIGNAL)):
            entry["warning"] = (
                f"class {name}: noise dominates at {count:.0f} (noisy) records "
                f"(noise/signal: mean {_ratio(mean_ratio)}, "
                f"covariance {_ratio(covariance_ratio)}; {100 * min(share, 1.0):.0f}% of the released trace is "
                f"noise); at epsilon {calibration.epsilon:g} a useful release needs about "
                f"{needed['mean'] or 'far more'} records for the mean (noise/signal < {USEFUL_MEAN_NOISE_TO_SIGNAL:g}) "
                f"and {needed['covariance'] or 'far more'} for the covariance "
                f"(< {USEFUL_COVARIANCE_NOISE_TO_SIGNAL:g})")
    return out


def _noise_to_signal(noise_norm: float, released: np.ndarray) -> float | None:
    """RMS noise norm over the released (Frobenius) norm less the noise's expected share; None if none is left."""
    signal_squared = float(np.sum(np.square(released))) - noise_norm**2
    return noise_norm / math.sqrt(signal_squared) if signal_squared > 0 else None


def _below(ratio: float | None, threshold: float) -> bool:
    return ratio is not None and ratio <= threshold


def _ratio(ratio: float | None) -> str:
    return "noise only" if ratio is None else f"{ratio:.2f}"


def synthetic_counts(noisy_counts: np.ndarray, samples_per_class: int) -> list[int]:
    """Images to draw per released class: `samples_per_class` if > 0, else the class's pooled noisy count.

    The pooled count is the size of the real class over all sites, so the synthetic set does not shrink as sites
    join (FedKT-CSD's invariance to the number of clients).
    """
    if samples_per_class > 0:
        return [samples_per_class] * len(noisy_counts)
    return [max(0, round(float(n))) for n in noisy_counts]


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
