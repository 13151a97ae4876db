"""Local training and evaluation shared by every method: focal loss, Adam (amsgrad), macro-F1, balanced accuracy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from monai.losses import FocalLoss
from sklearn.metrics import balanced_accuracy_score, f1_score
from torch import Tensor, nn
from torch.utils.data import DataLoader

LossFn = Callable[[Tensor, Tensor], Tensor]
Penalty = Callable[[nn.Module], Tensor]


def focal_loss(gamma: float) -> LossFn:
    """Softmax focal loss on (N, C) logits and (N,) class indices (the reference setup's loss)."""
    focal = FocalLoss(to_onehot_y=True, use_softmax=True, gamma=gamma)
    return lambda logits, labels: focal(logits, labels[:, None])


def train_epochs(model: nn.Module, loader: DataLoader, loss_fn: LossFn, epochs: int, learning_rate: float,
                 weight_decay: float, penalty: Penalty | None = None) -> float:
    """Train the parameters that require grad for `epochs` passes; returns the last epoch's mean loss.

    A fresh optimizer each call (each round), as FL sites usually do; `penalty(model)` is added to every batch
    loss (FedProx's and Ditto's proximal terms).
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=learning_rate, weight_decay=weight_decay, amsgrad=True)
    model.train()
    mean_loss = float("nan")
    for _ in range(epochs):
        total, count = 0.0, 0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            if penalty is not None:
                loss = loss + penalty(model)
            loss.backward()
            optimizer.step()
            total, count = total + float(loss.detach()) * len(labels), count + len(labels)
        mean_loss = total / count
        if not np.isfinite(mean_loss):
            raise FloatingPointError(f"training loss became {mean_loss}; lower the learning rate")
    return mean_loss


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> dict[str, float]:
    """Macro-F1 (sklearn, zero_division=0) and balanced accuracy of `model` in eval mode."""
    model.eval()
    truth, predicted = [], []
    for images, labels in loader:
        truth.append(labels.numpy())
        predicted.append(model(images).argmax(dim=1).numpy())
    y_true, y_pred = np.concatenate(truth), np.concatenate(predicted)
    return {
        "macro_f1": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "balanced_accuracy": float(balanced_accuracy_score(y_true, y_pred)),
    }
