"""Local training and validation of a segmentation network: the loop MONAI's BraTS tutorial runs, nothing more.

Mixed precision (autocast + gradient scaling) is used on CUDA only; on CPU everything runs in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from monai.data import DataLoader, decollate_batch
from monai.inferers import sliding_window_inference
from monai.losses import DiceLoss
from monai.metrics import DiceMetric
from monai.transforms import Activations, AsDiscrete, Compose
from torch import nn

from fl_contract.segmentation import DICE_KEYS


def dice_loss() -> DiceLoss:
    """Sigmoid Dice over the TC/WT/ET channels (MONAI's BraTS settings)."""
    return DiceLoss(smooth_nr=0.0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)


def uses_amp(device: torch.device) -> bool:
    return device.type == "cuda"


def precision(device: torch.device) -> str:
    """How training runs on `device`, for the site's log."""
    return "automatic mixed precision (float16 autocast)" if uses_amp(device) else "float32"


@contextlib.contextmanager
def _autocast(device: torch.device) -> Iterator[None]:
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
            with _autocast(device):
                loss = loss_fn(net(image), label)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += float(loss.detach())
            steps += 1
    return total / max(steps, 1)


def validate(
    net: nn.Module, loader: DataLoader, roi_size: Sequence[int], device: torch.device, sw_batch_size: int = 1,
    overlap: float = 0.5,
) -> dict[str, float]:
    """Sliding-window Dice per region (TC, WT, ET) and their mean over the loader's whole volumes.

    A region absent from both label and prediction scores 1 (BraTS convention), so no value is NaN.
    """
    metric = DiceMetric(include_background=True, reduction="mean_batch", ignore_empty=False)
    post = Compose([Activations(sigmoid=True), AsDiscrete(threshold=0.5)])
    net.eval()
    with torch.no_grad():
        for batch in loader:
            image, label = batch["image"].to(device), batch["label"].to(device)
            with _autocast(device):
                logits = sliding_window_inference(image, list(roi_size), sw_batch_size, net, overlap=overlap)
            if not isinstance(logits, torch.Tensor):  # MONAI passes through a network's tuple or dict output
                raise TypeError(f"the segmentation network returned {type(logits).__name__}, not a tensor of logits")
            metric(y_pred=[post(x) for x in decollate_batch(logits.float())], y=decollate_batch(label))
    per_region = [float(v) for v in metric.aggregate()]
    return {**dict(zip(DICE_KEYS, per_region)), DICE_KEYS[-1]: sum(per_region) / len(per_region)}
