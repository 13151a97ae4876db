"""The downstream classifier of the optional evaluation round: trained on the synthetic set, scored on real images.

One factory for server (training) and sites (evaluation): a narrow CNN5 from the model registry, images in [0, 1].
Training runs whole passes over the set, at least `epochs` of them and as many more as `min_steps` optimiser
steps need: a fixed number of passes gives a small synthetic set too few steps (10 passes over 77 images are
30 steps, and the classifier predicts one class everywhere), while large sets get their passes as before.

The round's model is an `Ensemble` of such classifiers, trained alike but for their seeds: on one synthetic set, one
classifier's balanced accuracy on the real held-out images moved from 0.57 to 1.00 with its seed alone, so a single
classifier's score says as much about its seed as about the synthetic set (docs/fedkt-csd.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fl_contract.fedkt_csd.protocol import PREDICTED_CLASSES, RECALL_PREFIX
from fl_contract.models import build_model

if TYPE_CHECKING:
    from fl_contract.job_params.fedkt_csd import FedKTCSDParams

CLASSIFIER = "cnn5_flat"
CHANNELS = (8, 16, 32, 64, 64)
HIDDEN = 64
BATCH_SIZE = 32


@dataclass(frozen=True)
class TrainingBudget:
    """What `train_classifier` ran: whole passes over `images` images, `steps` optimiser steps in all."""

    images: int
    epochs: int
    steps: int


def classifier_args(image_size: int, num_classes: int) -> dict[str, Any]:
    return {"in_size": image_size, "num_classes": num_classes, "channels": list(CHANNELS), "hidden": HIDDEN}


def build_classifier(image_size: int, num_classes: int) -> nn.Module:
    return build_model(CLASSIFIER, **classifier_args(image_size, num_classes))


class Ensemble(nn.Module):
    """Classifiers whose mean class probabilities classify: `forward` returns those probabilities, whose argmax is
    the prediction, like a single classifier's logits."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one classifier")
        self.members = nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(x).softmax(dim=1) for member in self.members]).mean(dim=0)


def build_ensemble(image_size: int, num_classes: int, members: int) -> Ensemble:
    """An untrained ensemble of `members` classifiers: what a site loads the server's trained weights into."""
    return Ensemble([build_classifier(image_size, num_classes) for _ in range(members)])


def member_seeds(seed: int, members: int) -> range:
    """The seeds of an ensemble's members: the job's seed, then the next ones."""
    return range(seed, seed + members)


def training_budget(num_images: int, epochs: int, min_steps: int, batch_size: int) -> TrainingBudget:
    """At least `epochs` passes, and enough passes for at least `min_steps` steps of `batch_size` images."""
    per_epoch = math.ceil(num_images / batch_size)
    passes = max(epochs, math.ceil(min_steps / per_epoch)) if per_epoch else 0
    return TrainingBudget(num_images, passes, passes * per_epoch)


def train_classifier(images: torch.Tensor, labels: torch.Tensor, num_classes: int, epochs: int, seed: int,
                     batch_size: int = BATCH_SIZE, learning_rate: float = 1e-3, model: nn.Module | None = None,
                     min_steps: int = 0, noise_std: float = 0.0) -> nn.Module:
    """Adam on the cross-entropy over (images in [0, 1], labels), shuffled by `seed`, for `training_budget` passes.

    `noise_std` > 0 adds Gaussian noise of that std to every batch: a decoder returns smooth images without the
    sensor noise real ones carry, and a classifier trained only on smooth images may key on their smoothness.
    """
    torch.manual_seed(seed)
    model = model or build_classifier(images.shape[-1], num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(training_budget(len(labels), epochs, min_steps, batch_size).epochs):
        for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
            x = images[batch]
            if noise_std > 0:
                x = x + noise_std * torch.randn(x.shape, generator=generator)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), labels[batch]).backward()
            optimizer.step()
    return model.eval()


def train_ensemble(images: torch.Tensor, labels: torch.Tensor, num_classes: int, epochs: int, seed: int,
                   members: int, min_steps: int = 0, noise_std: float = 0.0) -> Ensemble:
    """`members` classifiers, each `train_classifier` with its own seed (`member_seeds`), in one `Ensemble`."""
    return Ensemble([train_classifier(images, labels, num_classes, epochs, member_seed, min_steps=min_steps,
                                      noise_std=noise_std) for member_seed in member_seeds(seed, members)])


def train_job_ensemble(images: torch.Tensor, labels: torch.Tensor, job: FedKTCSDParams) -> Ensemble:
    """The evaluation round's ensemble with the job's classifier parameters: the one recipe that the server's round,
    the references it is compared with and the benchmarks all train."""
    return train_ensemble(images, labels, len(job.classes), job.classifier_epochs, job.seed, job.classifier_members,
                          min_steps=job.classifier_min_steps, noise_std=job.classifier_noise)


def job_training_budget(num_images: int, job: FedKTCSDParams) -> TrainingBudget:
    """Each member's `training_budget` in `train_job_ensemble` on `num_images` images."""
    return training_budget(num_images, job.classifier_epochs, job.classifier_min_steps, BATCH_SIZE)


def predict(model: nn.Module, images: torch.Tensor, batch_size: int = 256) -> np.ndarray:
    """Predicted class indices of images in [0, 1]."""
    with torch.inference_mode():
        return torch.cat([model.eval()(batch).argmax(dim=1) for batch in images.split(batch_size)]).numpy()


def evaluate_classifier(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                        class_names: Sequence[str] | None = None) -> dict[str, float]:
    """Accuracy, balanced accuracy (mean recall over the classes present), the number of images and of distinct
    predicted classes (1: a constant classifier), and with `class_names` `recall_<class>` of each class present."""
    if len(labels) == 0:
        raise ValueError("no held-out images to evaluate on; raise holdout_fraction or add images")
    predicted, truth = predict(model, images), labels.numpy()
    present = np.unique(truth)
    recall = [float(np.mean(predicted[truth == c] == c)) for c in present]
    metrics = {"accuracy": float(np.mean(predicted == truth)), "balanced_accuracy": float(np.mean(recall)),
               "num_test": float(len(truth)), PREDICTED_CLASSES: float(len(np.unique(predicted)))}
    if class_names is not None:
        metrics.update({RECALL_PREFIX + class_names[c]: r for c, r in zip(present, recall)})
    return metrics
