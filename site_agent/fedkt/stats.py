"""Per-class sufficient statistics of clipped DC-AE latents: the only thing a FedKT-CSD site computes.

Each latent is clipped to L2 norm <= R (the autoencoder's clip norm), which bounds one record's contribution
for the server's DP release, then put on the fixed-point grid of `wire` so that every sum below is exact.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers import AutoencoderDC

from fl_contract.fedkt.wire import ClassStatistics, fixed_point_scales, quantize_latents, upper_triangle


def encode_latents(model: AutoencoderDC, images: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """(N, 3, H, W) images in [-1, 1] -> (N, d) flattened latents `model.encode(x).latent`, float32 on CPU."""
    if images.ndim != 4 or images.shape[1] != model.config.in_channels:
        raise ValueError(f"expected images (N, {model.config.in_channels}, H, W), got {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise ValueError("no images to encode")
    if images.min() < -1.0 or images.max() > 1.0:
        raise ValueError("images must be scaled to [-1, 1] (use fl_contract.models.dcae.to_autoencoder_range)")
    device = next(model.parameters()).device
    with torch.inference_mode():
        batches = [model.encode(batch.to(device)).latent.flatten(1).float().cpu() for batch in images.split(batch_size)]
    return torch.cat(batches)


def clip_latents(latents: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Scale each row to L2 norm <= `clip_norm` (rows already inside are unchanged), in float64."""
    latents = latents.double()
    norms = latents.norm(dim=1, keepdim=True)
    return latents * torch.clamp(clip_norm / norms.clamp_min(torch.finfo(torch.float64).tiny), max=1.0)


def class_statistics(latents: torch.Tensor, labels: torch.Tensor, num_classes: int,
                     clip_norm: float) -> ClassStatistics:
    """Per class: sum of clipped latents, upper triangle of the sum of their outer products, and the count."""
    if labels.shape != (latents.shape[0],):
        raise ValueError(f"{latents.shape[0]} latents but labels of shape {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes - 1}, got {labels.min()}..{labels.max()}")
    q = quantize_latents(clip_latents(latents, clip_norm).numpy(), clip_norm)
    labels_np = labels.cpu().numpy()
    step, outer_step = fixed_point_scales(clip_norm)
    sums, outers, counts = [], [], []
    for c in range(num_classes):
        q_c = q[labels_np == c]
        sums.append(q_c.sum(axis=0) * step)
        outers.append(upper_triangle(q_c.T @ q_c) * outer_step)
        counts.append(float(q_c.shape[0]))
    return ClassStatistics(np.stack(sums), np.stack(outers), np.array(counts))


def site_statistics(model: AutoencoderDC, images: torch.Tensor, labels: torch.Tensor, num_classes: int,
                    clip_norm: float, batch_size: int = 64) -> ClassStatistics:
    """Encode a site's images (in [-1, 1]) and reduce them to per-class statistics."""
    return class_statistics(encode_latents(model, images, batch_size), labels, num_classes, clip_norm)
