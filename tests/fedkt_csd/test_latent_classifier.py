"""The released class Gaussians as a classifier of encoded images, and the evaluate task's message that carries them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_contract.fedkt_csd import protocol
from fl_contract.fedkt_csd.classifier import evaluate_classifier
from fl_contract.models.dcae import LoadedAutoencoder, build_tiny_dcae, load_autoencoder, save_autoencoder
from server_app.fedkt_csd import single_class_sites
from site_agent.fedkt_csd.latent_classifier import LatentGaussianClassifier
from site_agent.fedkt_csd.stats import clip_latents, encode_latents

CLASSES = ["MEL", "NV", "BCC", "BKL"]


@pytest.fixture(scope="module")
def autoencoder(tmp_path_factory: pytest.TempPathFactory) -> LoadedAutoencoder:
    folder = save_autoencoder(build_tiny_dcae(0), tmp_path_factory.mktemp("ae") / "tiny-dcae", clip_norm=40.0,
                              provenance="test")
    return load_autoencoder(folder)


def _tinted(n: int, tint: tuple[float, float, float], seed: int) -> torch.Tensor:
    """n 64 x 64 images of one colour with pixel noise, in [0, 1]."""
    noise = 0.05 * torch.randn(n, 3, 64, 64, generator=torch.Generator().manual_seed(seed))
    return (torch.tensor(tint).view(1, 3, 1, 1) + noise).clamp(0.0, 1.0)


def _fitted(ae: LoadedAutoencoder, images: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The exact mean and covariance (plus a small ridge: fewer images than dimensions) of the clipped latents."""
    latents = clip_latents(encode_latents(ae.model, images * 2.0 - 1.0), ae.clip_norm).numpy()
    return latents.mean(axis=0), np.cov(latents, rowvar=False) + 1e-3 * np.eye(latents.shape[1])


def test_the_released_gaussians_classify_by_density_and_never_predict_a_withheld_class(autoencoder):
    reddish, bluish = (0.8, 0.3, 0.3), (0.3, 0.3, 0.8)
    (mean_a, cov_a), (mean_b, cov_b) = _fitted(autoencoder, _tinted(48, reddish, 0)), _fitted(
        autoencoder, _tinted(48, bluish, 1))
    classifier = LatentGaussianClassifier(autoencoder, np.array([0, 2]), np.stack([mean_a, mean_b]),
                                          np.stack([cov_a, cov_b]), CLASSES)  # NV and BKL withheld
    images = torch.cat([_tinted(6, reddish, 2), _tinted(6, bluish, 3)])
    labels = torch.tensor([0] * 6 + [2] * 6)

    scores = classifier(images)
    metrics = evaluate_classifier(classifier, images, labels, CLASSES)

    assert scores.shape == (12, 4) and torch.isinf(scores[:, [1, 3]]).all() and torch.isfinite(scores[:, [0, 2]]).all()
    assert metrics["balanced_accuracy"] == 1.0 and metrics["recall_MEL"] == metrics["recall_BCC"] == 1.0
    swapped = LatentGaussianClassifier(autoencoder, np.array([2, 0]), np.stack([mean_a, mean_b]),
                                       np.stack([cov_a, cov_b]), CLASSES)  # the same densities, labels swapped
    assert evaluate_classifier(swapped, images, labels, CLASSES)["balanced_accuracy"] == 0.0


def test_a_covariance_that_is_no_density_is_refused_naming_its_class(autoencoder):
    dim = 128
    broken = -np.eye(dim)

    with pytest.raises(ValueError, match="released Gaussian of class BCC is not a usable density.*positive definite"):
        LatentGaussianClassifier(autoencoder, np.array([0, 2]), np.zeros((2, dim)), np.stack([np.eye(dim), broken]),
                                 CLASSES)
    with pytest.raises(ValueError, match="class NV .*not finite"):
        LatentGaussianClassifier(autoencoder, np.array([1]), np.full((1, dim), np.nan), np.eye(dim)[None], CLASSES)


def test_the_evaluate_message_carries_the_gaussians_beside_the_weights_and_a_site_checks_their_shapes():
    weights = {"members.0.head.weight": np.ones((4, 2))}
    gaussians = protocol.gaussians_params(np.array([0, 3]), np.zeros((2, 8)), np.stack([np.eye(8)] * 2))

    rest, (classes, means, covariances) = protocol.split_evaluation({**weights, **gaussians}, "site-1", 4, 8)

    assert set(rest) == set(weights) and classes.tolist() == [0, 3] and means.shape == (2, 8)
    assert covariances.shape == (2, 8, 8) and covariances.dtype == np.float64
    with pytest.raises(ValueError, match=r"site-1: .*this site's 16-dimensional latents \(means \(2, 8\) "
                                         r"\(expected \(2, 16\)\)"):
        protocol.split_evaluation(gaussians, "site-1", 4, 16)
    with pytest.raises(ValueError, match="site-1: .*4 classes"):
        protocol.split_evaluation(protocol.gaussians_params(np.array([0, 4]), np.zeros((2, 8)),
                                                            np.stack([np.eye(8)] * 2)), "site-1", 4, 8)
    with pytest.raises(ValueError, match="site-2: the evaluate task carries no released Gaussians.*update it"):
        protocol.split_evaluation(weights, "site-2", 4, 8)


def test_a_model_that_predicts_one_class_at_a_site_of_several_classes_is_named():
    """The server warns about either model (the CNN or the Gaussians) by this: a site whose held-out images hold one
    class only is not a constant model, however few classes it predicts there."""
    scores = {"site-1": {protocol.PREDICTED_CLASSES: 1.0, "recall": {"MEL": 1.0, "NV": 0.0}},
              "site-2": {protocol.PREDICTED_CLASSES: 2.0, "recall": {"MEL": 0.5, "NV": 1.0}},
              "site-3": {protocol.PREDICTED_CLASSES: 1.0, "recall": {"NV": 1.0}}}

    assert single_class_sites(scores) == ["site-1"]
