"""Local training of a segmentation network: the loop MONAI's BraTS tutorial runs, nothing more.

The precision comes from `fl_contract.precision`: bfloat16 autocast on GPUs that run it natively, float16 with
gradient scaling on older GPUs, float32 on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from monai.losses import DiceLoss
from torch import nn

from fl_contract.precision import select_precision


def dice_loss() -> DiceLoss:
    """Sigmoid Dice over the TC/WT/ET channels (MONAI's BraTS settings)."""
    return DiceLoss(smooth_nr=0.0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)


def train_epochs(
    net: nn.Module,
    loader: Iterable[Mapping[str, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epochs: int,
    should_stop: Callable[[], bool] = lambda: False,
) -> float:
    """`epochs` passes over `loader`; returns the mean loss over all steps (mixed precision on CUDA)."""
    loss_fn = dice_loss()
    precision = select_precision(device)
    scaler = precision.scaler()
    net.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        for batch in loader:
            if should_stop():
                return total / max(steps, 1)
            image = batch["image"].to(device, non_blocking=True)
            label = batch["label"].to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with precision.autocast():
                loss = loss_fn(net(image), label)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += float(loss.detach())
            steps += 1
    return total / max(steps, 1)
