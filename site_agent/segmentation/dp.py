"""Client-side differential privacy on a site's update: clip the weight difference, add Gaussian noise.

The site sends global + clip(local - global, C) + N(0, (z C)^2 I): the L2 norm of the whole difference (all
tensors together) is clipped to C, and every coordinate gets independent Gaussian noise of std z * C. One round
is then a Gaussian mechanism of sensitivity C on the site's contribution (site-level DP); compose over rounds
for the job's total (e.g. `server_app.privacy.dp_calibration.composed_epsilon(z, num_rounds, delta)`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def noise_std(clip_norm: float, noise_multiplier: float) -> float:
    return float(clip_norm * noise_multiplier)


def privatise_update(
    global_params: Mapping[str, np.ndarray],
    local_params: Mapping[str, np.ndarray],
    clip_norm: float,
    noise_multiplier: float,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """The parameters the site sends instead of `local_params` (same names, shapes and dtypes)."""
    if clip_norm <= 0 or noise_multiplier < 0:
        raise ValueError(f"DP needs clip_norm > 0 and noise_multiplier >= 0, got {clip_norm} and {noise_multiplier}")
    diff = {
        k: np.asarray(local_params[k], np.float64) - np.asarray(global_params[k], np.float64) for k in global_params
    }
    norm = float(np.sqrt(sum(np.sum(d * d) for d in diff.values())))
    scale = min(1.0, clip_norm / norm) if norm > 0 else 1.0
    std = noise_std(clip_norm, noise_multiplier)
    return {
        k: (np.asarray(global_params[k], np.float64) + d * scale + rng.normal(0.0, std, d.shape)).astype(
            np.asarray(local_params[k]).dtype)
        for k, d in diff.items()
    }
