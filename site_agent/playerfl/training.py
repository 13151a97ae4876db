"""Local training and evaluation shared by every method: focal loss, Adam (amsgrad), macro-F1, balanced accuracy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from monai.losses import FocalLoss
from nvflare.app_opt.pt.fedproxloss import PTFedProxLoss
from sklearn.metrics import balanced_accuracy_score, f1_score
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from fl_contract.playerfl.layers import Layer
from site_agent.playerfl.state import StateDict

LossFn = Callable[[Tensor, Tensor], Tensor]
Penalty = Callable[[nn.Module], Tensor]
FRESH_BATCH_OFFSET = 50_000  # the sensitivity batch's shuffling stream, apart from every round's epoch order


def focal_loss(gamma: float) -> LossFn:
    """Softmax focal loss on (N, C) logits and (N,) class indices (the reference setup's loss)."""
    focal = FocalLoss(to_onehot_y=True, use_softmax=True, gamma=gamma)
    return lambda logits, labels: focal(logits, labels[:, None])


def train_epochs(model: nn.Module, loader: DataLoader[Any], loss_fn: LossFn, epochs: int, learning_rate: float,
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
def evaluate(model: nn.Module, loader: DataLoader[Any]) -> dict[str, float]:
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


def proximal_penalty(reference: nn.Module, mu: float) -> Penalty:
    """FLARE's FedProx term mu/2 * ||w - w_ref||^2 against a frozen `reference` (FedProx's and Ditto's regulariser)."""
    reference.requires_grad_(False)
    prox = PTFedProxLoss(mu=mu)
    return lambda model: prox(model, reference)


@dataclass(frozen=True)
class LocalTrainer:
    """One round of local training at a site, as a method sees it: it picks models and penalties, not loaders.

    Shuffling is seeded by (seed, round), so every pass of the round sees the same order and a restarted site
    repeats it; `new_model` builds the job's initial weights, the same at every site.
    """

    data: Dataset[Any]
    layers: list[Layer]
    new_model: Callable[[], nn.Module]
    loss_fn: LossFn
    epochs: int
    batch_size: int
    learning_rate: float
    weight_decay: float
    seed: int
    round_number: int

    def train(self, model: nn.Module, penalty: Penalty | None = None, epochs: int | None = None) -> float:
        """`epochs` (default: the job's local epochs) passes over the round's order; returns the last mean loss."""
        return train_epochs(model, self._loader(0), self.loss_fn, self.epochs if epochs is None else epochs,
                            self.learning_rate, self.weight_decay, penalty=penalty)

    def model_from(self, state: StateDict) -> nn.Module:
        """A model of the job's architecture holding `state`."""
        model = self.new_model()
        model.load_state_dict(state)
        return model

    def fresh_batch(self) -> tuple[Tensor, Tensor]:
        """One batch of training images drawn independently of the epochs' order (the reference code's choice)."""
        images, labels = next(iter(self._loader(FRESH_BATCH_OFFSET)))
        return images, labels

    def _loader(self, offset: int) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.round_number + offset)
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True, generator=generator)
