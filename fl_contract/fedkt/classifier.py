"""The downstream classifier of the optional evaluation round: trained on the synthetic set, scored on real images.

One factory for server (training) and sites (evaluation): a narrow CNN5 from the model registry, images in [0, 1].
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import balanced_accuracy_score
from torch import nn

from fl_contract.models import build_model

CLASSIFIER = "cnn5"
CHANNELS = (8, 16, 32, 64, 64)
HIDDEN = 64


def classifier_args(image_size: int, num_classes: int) -> dict:
    return {"in_size": image_size, "num_classes": num_classes, "channels": list(CHANNELS), "hidden": HIDDEN}


def build_classifier(image_size: int, num_classes: int) -> nn.Module:
    return build_model(CLASSIFIER, **classifier_args(image_size, num_classes))


def train_classifier(images: torch.Tensor, labels: torch.Tensor, num_classes: int, epochs: int, seed: int,
                     batch_size: int = 32, learning_rate: float = 1e-3, model: nn.Module | None = None) -> nn.Module:
    """Adam on the cross-entropy for `epochs` passes over (images in [0, 1], labels), shuffled by `seed`."""
    torch.manual_seed(seed)
    model = model or build_classifier(images.shape[-1], num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(images[batch]), labels[batch]).backward()
            optimizer.step()
    return model.eval()


def evaluate_classifier(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Accuracy and balanced accuracy (mean recall over the classes present) on labelled images in [0, 1]."""
    if len(labels) == 0:
        raise ValueError("no held-out images to evaluate on; raise holdout_fraction or add images")
    with torch.inference_mode():
        predicted = model.eval()(images).argmax(dim=1).numpy()
    truth = labels.numpy()
    return {"accuracy": float(np.mean(predicted == truth)),
            "balanced_accuracy": float(balanced_accuracy_score(truth, predicted)), "num_test": float(len(truth))}
