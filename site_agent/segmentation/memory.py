"""Will a segmentation round fit in the GPU's memory? An estimate at task start, so a site that cannot train at the
job's batch size and ROI says which setting to lower before it reads a case, not with CUDA's out-of-memory error
minutes into a round.

SegResNet is convolutional, so the memory its training step keeps for the backward pass grows linearly with the
voxels of a batch. That memory per voxel is measured, not guessed: one training forward pass of the job's network
on the CPU at two small probe ROIs, in the precision the GPU will use, counting every distinct tensor autograd
saves (`saved_tensors_hooks`). Weights, gradients and Adam's two moments add four float32 copies of the parameters. What
the count cannot see (cuDNN workspaces, the caching allocator's fragmentation) is a margin: `WORKSPACE_FRACTION`
of the activations plus `FIXED_MARGIN_BYTES`. The result is an estimate, not a measurement of the GPU.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fl_contract.precision import Precision
from site_agent.segmentation.training import dice_loss

PROBE_ROIS = ((16, 16, 16), (24, 24, 24))
"""Small enough to run in well under a second on the CPU, divisible by SegResNet's 8x downsampling."""
WORKSPACE_FRACTION = 0.2
FIXED_MARGIN_BYTES = 512 * 2**20
ROI_STEP = 16
GIB = 2**30


class GpuMemoryError(RuntimeError):
    """The job's batch size and ROI do not fit in the site's GPU memory; the message names the setting to lower."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one training step needs: `fixed` (weights, gradients, Adam, margin) plus `per_voxel` per batch voxel."""

    fixed: int
    per_voxel: float

    def total(self, batch_size: int, roi_size: Sequence[int]) -> int:
        return self.fixed + math.ceil(self.per_voxel * batch_size * math.prod(roi_size))


def estimate_training_memory(net: nn.Module, out_channels: int, precision: Precision) -> MemoryEstimate:
    """Measure what a training step of `net` keeps for the backward pass at the two `PROBE_ROIS` (a copy on the
    CPU, forward pass and loss in `precision`'s float width): the slope is the memory per voxel, the
    intercept what does not grow with the ROI (autocast's 16-bit weight copies). Adds the parameters' four float32
    copies and the margins."""
    probe = copy.deepcopy(net).to("cpu").train()
    # float16 and bfloat16 tensors are the same size, and the CPU's bfloat16 kernels are the fast ones
    cpu_precision = Precision("cpu", None if precision.autocast_dtype is None else torch.bfloat16, uses_scaler=False)
    small, large = (_saved_bytes(probe, out_channels, cpu_precision, roi) for roi in PROBE_ROIS)
    voxels = [math.prod(roi) for roi in PROBE_ROIS]
    per_voxel = (large - small) / (voxels[1] - voxels[0])
    constant = max(small - per_voxel * voxels[0], 0.0)
    parameter_bytes = sum(p.numel() for p in probe.parameters()) * 4
    return MemoryEstimate(int(4 * parameter_bytes + constant) + FIXED_MARGIN_BYTES,
                          per_voxel * (1 + WORKSPACE_FRACTION))


def _saved_bytes(net: nn.Module, out_channels: int, precision: Precision, roi: Sequence[int]) -> int:
    """Bytes of the distinct non-parameter tensors autograd saves in one forward pass and loss, plus the batch."""
    generator = torch.Generator().manual_seed(0)
    image = torch.randn(1, _in_channels(net), *roi, generator=generator)
    label = (torch.rand(1, out_channels, *roi, generator=generator) > 0.5).float()
    parameters = {p.untyped_storage().data_ptr() for p in net.parameters()}
    saved: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor), precision.autocast():
        loss = dice_loss()(net(image), label)
    del loss  # the graph (and the storages counted) live until here, so no address is reused while counting
    return sum(saved.values()) + image.nbytes + label.nbytes


def check_training_memory(estimate: MemoryEstimate, batch_size: int, roi_size: Sequence[int], free_bytes: int) -> int:
    """The estimated bytes of a training step; raises `GpuMemoryError` naming the job setting to lower (the
    largest batch_size that fits, or else a smaller roi_size) when they exceed `free_bytes`."""
    needed = estimate.total(batch_size, roi_size)
    if needed <= free_bytes:
        return needed
    detail = (f"batch_size {batch_size} at roi_size {list(roi_size)} needs about {needed / GIB:.1f} GiB of GPU "
              f"memory (estimate), the GPU has {free_bytes / GIB:.1f} GiB free")
    per_case = estimate.per_voxel * math.prod(roi_size)
    fitting_batch = int((free_bytes - estimate.fixed) // per_case) if free_bytes > estimate.fixed else 0
    if fitting_batch >= 1:
        raise GpuMemoryError(f"{detail}: lower the job's batch_size to {fitting_batch} (or its roi_size)")
    raise GpuMemoryError(f"{detail}: set the job's batch_size to 1 and lower its roi_size to "
                         f"{smaller_roi(estimate, roi_size, free_bytes)} or less (see docs/site-it-guide.md)")


def smaller_roi(estimate: MemoryEstimate, roi_size: Sequence[int], free_bytes: int) -> list[int]:
    """`roi_size` scaled down in proportion, each side a multiple of `ROI_STEP`, until batch 1 fits `free_bytes`."""
    room = max(free_bytes - estimate.fixed, 0) / estimate.per_voxel
    scale = (room / math.prod(roi_size)) ** (1 / len(roi_size))
    return [max(ROI_STEP, int(side * scale) // ROI_STEP * ROI_STEP) for side in roi_size]


def _in_channels(net: nn.Module) -> int:
    first = next(m for m in net.modules() if isinstance(m, nn.Conv3d))
    return int(first.in_channels)
