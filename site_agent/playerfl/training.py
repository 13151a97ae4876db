"""Local training and evaluation shared by every method: focal loss with per-class alpha, Adam (amsgrad) whose state
the site keeps across rounds, macro-F1, balanced accuracy. On the site's device, in its precision
(fl_contract.precision: mixed precision on a GPU, float32 on the CPU, where the arithmetic is exactly as without it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from monai.losses import FocalLoss
from nvflare.app_opt.pt.fedproxloss import PTFedProxLoss
from sklearn.metrics import balanced_accuracy_score, f1_score
from torch import Tensor, nn
from torch.utils.data import DataLoader

from fl_contract.playerfl.layers import Layer
from fl_contract.precision import select_precision
from site_agent.playerfl.data import IsicImages
from site_agent.playerfl.state import StateDict

LossFn = Callable[[Tensor, Tensor], Tensor]
Penalty = Callable[[nn.Module], Tensor]
OptimizerStates = dict[str, dict[str, Any]]
FRESH_BATCH_OFFSET = 50_000  # the sensitivity batch's shuffling stream, apart from every round's epoch order
CPU = torch.device("cpu")


def focal_loss(gamma: float, alpha: Sequence[float] | None = None) -> LossFn:
    """Softmax focal loss on (N, C) logits and (N,) class indices; `alpha` weighs each class (the reference ISIC
    setup: gamma 1, alpha from the class frequencies)."""
    focal = FocalLoss(to_onehot_y=True, use_softmax=True, gamma=gamma, alpha=None if alpha is None else list(alpha))
    return lambda logits, labels: focal(logits, labels[:, None])


def adam(model: nn.Module, learning_rate: float, weight_decay: float) -> torch.optim.Optimizer:
    """The reference optimizer over the parameters that require grad: Adam with amsgrad and weight decay."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.Adam(trainable, lr=learning_rate, weight_decay=weight_decay, amsgrad=True)


def train_epochs(model: nn.Module, loader: DataLoader[Any], loss_fn: LossFn, epochs: int,
                 optimizer: torch.optim.Optimizer, penalty: Penalty | None = None, device: torch.device = CPU) -> float:
    """Train `model` (on `device`) with `optimizer` for `epochs` passes; returns the last epoch's mean loss.
    `penalty(model)` is added to every batch loss (FedProx's and Ditto's proximal terms), outside autocast."""
    precision = select_precision(device)
    scaler = precision.scaler()
    model.train()
    mean_loss = float("nan")
    for _ in range(epochs):
        total, count = 0.0, 0
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            with precision.autocast():
                loss = loss_fn(model(images), labels)
            if penalty is not None:
                loss = loss + penalty(model)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total, count = total + float(loss.detach()) * len(labels), count + len(labels)
        mean_loss = total / count
        check_finite(mean_loss)
    return mean_loss


def check_finite(loss: float) -> None:
    if not np.isfinite(loss):
        raise FloatingPointError(f"training loss became {loss}; lower the learning rate")


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader[Any], device: torch.device = CPU) -> dict[str, float]:
    """Macro-F1 (sklearn, zero_division=0) and balanced accuracy of `model` (on `device`) in eval mode."""
    model.eval()
    truth, predicted = [], []
    with select_precision(device).autocast():
        for images, labels in loader:
            truth.append(labels.numpy())
            predicted.append(model(images.to(device)).argmax(dim=1).cpu().numpy())
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

    Shuffling and augmentation are seeded by (seed, round), so a restarted site repeats a round exactly;
    `new_model` builds the job's initial weights, the same at every site. `optimizers` is the site's saved Adam state
    per role ("model", Ditto's and pFedMe's "personal", ...), updated in place: one optimizer per site and role
    across rounds, as in the reference code, rather than a fresh one each round.
    """

    data: IsicImages
    layers: list[Layer]
    new_model: Callable[[], nn.Module]
    loss_fn: LossFn
    epochs: int
    batch_size: int
    learning_rate: float
    weight_decay: float
    seed: int
    round_number: int
    optimizers: OptimizerStates
    device: torch.device = CPU

    def train(self, model: nn.Module, penalty: Penalty | None = None, epochs: int | None = None,
              role: str = "model") -> float:
        """`epochs` (default: the job's local epochs) passes with the role's optimizer; returns the last mean loss."""
        with self.optimizer(model, role) as optimizer:
            return train_epochs(model, self._loader(0), self.loss_fn, self.epochs if epochs is None else epochs,
                                optimizer, penalty=penalty, device=self.device)

    @contextlib.contextmanager
    def optimizer(self, model: nn.Module, role: str) -> Iterator[torch.optim.Optimizer]:
        """Adam over `model`'s trainable parameters, resuming the site's saved state for `role`; saved back after."""
        optimizer = adam(model, self.learning_rate, self.weight_decay)
        if role in self.optimizers:
            optimizer.load_state_dict(self.optimizers[role])
        yield optimizer
        self.optimizers[role] = optimizer.state_dict()

    def batches(self) -> Iterator[tuple[Tensor, Tensor]]:
        """The round's training batches on the device, `epochs` passes, for methods with their own inner loop
        (pFedMe)."""
        loader = self._loader(0)
        for _ in range(self.epochs):
            for images, labels in loader:
                yield images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def model_from(self, state: StateDict) -> nn.Module:
        """A model of the job's architecture holding `state`, on the device."""
        model = self.new_model().to(self.device)
        model.load_state_dict(state)
        return model

    def fresh_batch(self) -> tuple[Tensor, Tensor]:
        """One batch of training images, on the device, drawn independently of the epochs' order (the reference
        code's choice)."""
        images, labels = next(iter(self._loader(FRESH_BATCH_OFFSET)))
        return images.to(self.device), labels.to(self.device)

    def _loader(self, offset: int) -> DataLoader[Any]:
        stream = self.seed * 100_003 + self.round_number + offset
        self.data.reseed(stream % 2**32)
        generator = torch.Generator().manual_seed(stream)
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True, generator=generator)
