"""The released class Gaussians as a classifier of a site's images, through the frozen encoder the site already runs.

The DP release is a Gaussian per class over the encoder's clipped latents. Used as they are, as class densities with
equal priors, they classify an image by its latent (a Bayes classifier; quadratic discriminant analysis with the
released moments): what the release itself tells the classes apart by, before the server decodes samples of it into
images and trains a CNN on those. Post-processing of the release, so no privacy cost; our addition to the paper's
evaluation, which scores a model trained on the synthetic set (docs/fedkt-csd.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import multivariate_normal

from fl_contract.models.dcae import LoadedAutoencoder, to_autoencoder_range
from site_agent.fedkt_csd.stats import clip_latents, encode_latents


class LatentGaussianClassifier(torch.nn.Module):
    """`forward` takes (N, 3, S, S) images in [0, 1] and returns (N, num_classes) log densities of their clipped
    latents under each released class's Gaussian; a withheld class (not in `classes`, indices into `class_names`)
    scores -inf and is never predicted."""

    def __init__(self, ae: LoadedAutoencoder, classes: np.ndarray, means: np.ndarray, covariances: np.ndarray,
                 class_names: Sequence[str], encode_batch_size: int | None = None):
        super().__init__()
        self.ae, self.num_classes, self.encode_batch_size = ae, len(class_names), encode_batch_size
        self.densities = {}
        for c, mean, covariance in zip(classes, means, covariances):
            try:
                if not (np.isfinite(mean).all() and np.isfinite(covariance).all()):
                    raise ValueError("it holds values that are not finite")
                self.densities[int(c)] = multivariate_normal(mean, covariance)
            except (ValueError, np.linalg.LinAlgError) as err:
                raise ValueError(f"the released Gaussian of class {class_names[c]} is not a usable density ({err}): "
                                 "its covariance must be symmetric positive definite; rerun the release") from err

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        latents = encode_latents(self.ae.model, to_autoencoder_range(images), self.encode_batch_size)
        clipped = clip_latents(latents, self.ae.clip_norm).numpy()
        scores = np.full((len(clipped), self.num_classes), -np.inf)
        for c, density in self.densities.items():
            scores[:, c] = density.logpdf(clipped)
        return torch.from_numpy(scores)
