"""Local training of a segmentation network: the loop MONAI's BraTS tutorial runs, nothing more.

Mixed precision (autocast + gradient scaling) is used on CUDA only; on CPU everything runs in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
from monai.losses import DiceLoss
from torch import nn


def dice_loss() -> DiceLoss:
    """Sigmoid Dice over the TC/WT/ET channels (MONAI's BraTS settings)."""
    return DiceLoss(smooth_nr=0.0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)


def uses_amp(device: torch.device) -> bool:
    return device.type == "cuda"


def precision(device: torch.device) -> str:
    """How training runs on `device`, for the site's log."""
    return "automatic mixed precision (float16 autocast)" if uses_amp(device) else "float32"


@contextlib.contextmanager
def autocast(device: torch.device) -> Iterator[None]:
    if uses_amp(device):
        with torch.autocast(device_type="cuda"):
            yield
    else:
        yield


def train_epochs(
    net: nn.Module,
    loader: Iterable[Mapping[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epochs: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> float:
    """`epochs` passes over `loader`; returns the mean loss over all steps (AMP and gradient scaling on CUDA)."""
    loss_fn = dice_loss()
    scaler = torch.amp.GradScaler("cuda", enabled=uses_amp(device))
    net.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        for batch in loader:
            if should_stop():
                return total / max(steps, 1)
            image, label = batch["image"].to(device), batch["label"].to(device)
            optimizer.zero_grad(set_to_none=True)
            with autocast(device):
                loss = loss_fn(net(image), label)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += float(loss.detach())
            steps += 1
    return total / max(steps, 1)

