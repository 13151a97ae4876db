"""The FedKT-CSD job's messages, shared by the site task and the server workflow (docs/fedkt-csd.md).

Secure aggregation with dropout recovery takes four tasks: `keys` (server -> site: the announcement, i.e. session,
classes, image size and autoencoder identity; site -> server: its public keys), then `shares`, `statistics` (the
masked fixed-point statistics, `fl_contract.fedkt_csd.wire`) and `unmask`, whose messages are every masking kind's
(`fl_contract.secure_aggregation_messages`). Then, optionally:

    evaluate    server -> site: the classifier trained on the synthetic set (optional round), and the released
                class Gaussians (`gaussians_params`: the DP release itself, post-processed)
                site -> server: metrics accuracy, balanced_accuracy, num_test, predicted_classes and
                recall_<class> for each class present among the site's held-out images, of the classifier and,
                prefixed latent_, of the Gaussians as a classifier of the site's encoded held-out images
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fl_contract import secure_aggregation_messages as messages
from fl_contract.models.dcae import AutoencoderIdentity

TASK_KEYS = "keys"
TASK_STATISTICS = "statistics"
TASK_EVALUATE = "evaluate"
CLASSES = "classes"
IMAGE_SIZE = "image_size"
AUTOENCODER = "autoencoder"
PREDICTED_CLASSES = "predicted_classes"  # distinct classes the classifier predicts at the site; 1: constant
RECALL_PREFIX = "recall_"  # recall_<class name>, one per class present among the site's held-out images
EVALUATION_METRICS = ("accuracy", "balanced_accuracy", "num_test", PREDICTED_CLASSES)
LATENT_PREFIX = "latent_"  # the same metrics of the released Gaussians as a classifier (latent_accuracy, ...)
GAUSSIANS_PREFIX = "released_gaussians/"  # the evaluate task's params beside the classifier's weights
GAUSSIAN_FIELDS = ("classes", "means", "covariances")


def announcement(
    session: str, classes: Sequence[str], image_size: int, identity: AutoencoderIdentity
) -> dict[str, Any]:
    """What the server tells every site with the keys task, so that a mismatch fails before any key is made."""
    return {messages.SESSION: session, CLASSES: list(classes), IMAGE_SIZE: int(image_size),
            AUTOENCODER: identity.manifest()}


def check_announcement(meta: Mapping[str, Any], site: str, classes: Sequence[str], image_size: int,
                       identity: AutoencoderIdentity) -> str:
    """The session id, after checking that server and site agree on classes, image size and autoencoder."""
    server_ae = meta.get(AUTOENCODER) or {}
    expected = {CLASSES: (meta.get(CLASSES), list(classes)), IMAGE_SIZE: (meta.get(IMAGE_SIZE), int(image_size)),
                "autoencoder weights_sha256": (server_ae.get("weights_sha256"), identity.weights_sha256),
                "autoencoder clip_norm": (server_ae.get("clip_norm"), identity.clip_norm)}
    wrong = [f"{key}: server {theirs!r}, site {ours!r}" for key, (theirs, ours) in expected.items() if theirs != ours]
    if wrong:
        raise ValueError(f"site {site} does not match the server's FedKT-CSD setup ({'; '.join(wrong)}); the site and "
                         "the server must use the same job parameters and the same autoencoder folder (weights and "
                         "clip_norm.json)")
    if not meta.get(messages.SESSION):
        raise ValueError(f"site {site}: the keys task carries no session id")
    return str(meta[messages.SESSION])


def weighted_balanced_accuracy(scores: Mapping[str, Mapping[str, float]]) -> float:
    """An evaluation's site-weighted balanced accuracy: the sites' `balanced_accuracy` weighted by `num_test`."""
    sizes = np.array([m["num_test"] for m in scores.values()], dtype=np.float64)
    values = np.array([m["balanced_accuracy"] for m in scores.values()], dtype=np.float64)
    return float(sizes @ values / sizes.sum())


def evaluation_metrics(classifier: Mapping[str, float], gaussians: Mapping[str, float]) -> dict[str, float]:
    """The evaluate task's answer: the classifier's metrics as they are, the Gaussians' prefixed LATENT_PREFIX."""
    return {**classifier, **{LATENT_PREFIX + k: v for k, v in gaussians.items()}}


def split_metrics(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(the classifier's, the Gaussians') metrics of an `evaluation_metrics` answer, each without the prefix."""
    latent = {k[len(LATENT_PREFIX):]: v for k, v in metrics.items() if k.startswith(LATENT_PREFIX)}
    return {k: v for k, v in metrics.items() if not k.startswith(LATENT_PREFIX)}, latent


def gaussians_params(classes: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> dict[str, np.ndarray]:
    """The released class Gaussians as evaluate-task params: (K,) class indices, (K, d) means, (K, d, d)
    covariances."""
    arrays = (np.asarray(classes, dtype=np.int64), np.asarray(means, dtype=np.float64),
              np.asarray(covariances, dtype=np.float64))
    return {GAUSSIANS_PREFIX + field: array for field, array in zip(GAUSSIAN_FIELDS, arrays)}


def split_evaluation(params: Mapping[str, Any], site: str, num_classes: int,
                     dim: int) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The evaluate task's params as (the classifier's weights, (classes, means, covariances) of the Gaussians),
    after checking that the Gaussians fit the job's classes and this site's latent dimension `dim`."""
    weights = {k: v for k, v in params.items() if not k.startswith(GAUSSIANS_PREFIX)}
    missing = [field for field in GAUSSIAN_FIELDS if GAUSSIANS_PREFIX + field not in params]
    if missing:
        raise ValueError(f"site {site}: the evaluate task carries no released Gaussians ({', '.join(missing)} "
                         "missing); the server runs another version of the FedKT-CSD job: update it")
    classes, means, covariances = (np.asarray(params[GAUSSIANS_PREFIX + field]) for field in GAUSSIAN_FIELDS)
    k = len(classes)
    expected = {"classes": (classes.shape, (k,)), "means": (means.shape, (k, dim)),
                "covariances": (covariances.shape, (k, dim, dim))}
    wrong = [f"{field} {got} (expected {want})" for field, (got, want) in expected.items() if got != want]
    if wrong or k == 0 or len(set(classes.tolist())) != k or classes.min() < 0 or classes.max() >= num_classes:
        raise ValueError(f"site {site}: the server's released Gaussians do not fit this job's {num_classes} classes "
                         f"and this site's {dim}-dimensional latents ({'; '.join(wrong) or f'classes {classes}'}); "
                         "the site and the server must use the same job and autoencoder")
    return weights, (classes.astype(np.int64), means.astype(np.float64), covariances.astype(np.float64))
