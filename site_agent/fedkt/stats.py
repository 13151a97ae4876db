"""Per-class sufficient statistics of clipped DC-AE latents: the only thing a FedKT-CSD site computes.

Each latent is clipped to L2 norm <= R (the autoencoder's clip norm) in float64, which bounds one record's
contribution for the server's DP release, and quantised once onto the fixed-point grid of `wire`. From there on
everything is integer arithmetic on the ring's 64-bit words, exact and independent of order: the server's sum
over sites is the same bits as one site's vector over all records, whatever the partition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from diffusers import AutoencoderDC

from fl_contract.fedkt.wire import RING_DTYPE, check_capacity, join_fields, quantize_latents, upper_triangle

ENCODE_BATCH_SIZE = 32  # the one batch size every latent is encoded in, on every site (see encode_latents)


def encode_latents(model: AutoencoderDC, images: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) images in [-1, 1] -> (N, d) flattened latents `model.encode(x).latent`, float32 on CPU.

    Every batch holds exactly ENCODE_BATCH_SIZE images (the last one padded with zeros) and runs with
    deterministic kernels, so an image's latent has the same bits however many images its site holds: CPU kernels
    take other code paths for other batch sizes (batches of 1 or 3 differ from 32 by up to ~4e-5), and that would
    move a latent across a fixed-point grid line now and then, breaking the partition invariance of the sums.
    """
    if images.ndim != 4 or images.shape[1] != model.config.in_channels:
        raise ValueError(f"expected images (N, {model.config.in_channels}, H, W), got {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise ValueError("no images to encode")
    if images.min() < -1.0 or images.max() > 1.0:
        raise ValueError("images must be scaled to [-1, 1] (use fl_contract.models.dcae.to_autoencoder_range)")
    device = next(model.parameters()).device
    latents = []
    with torch.inference_mode(), _deterministic_kernels():
        for batch in images.split(ENCODE_BATCH_SIZE):
            padding = batch.new_zeros(ENCODE_BATCH_SIZE - len(batch), *batch.shape[1:])
            encoded = model.encode(torch.cat([batch, padding]).to(device)).latent
            latents.append(encoded[: len(batch)].flatten(1).float().cpu())
    return torch.cat(latents)


@contextmanager
def _deterministic_kernels() -> Iterator[None]:
    """Deterministic torch algorithms and no cuDNN autotuning while encoding; the previous settings after.

    `warn_only`: an op without a deterministic CUDA kernel (or cuBLAS without CUBLAS_WORKSPACE_CONFIG) warns
    instead of stopping the site.
    """
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, benchmark=False, deterministic=True,
                                        allow_tf32=torch.backends.cudnn.allow_tf32):
            yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


def clip_latents(latents: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Scale each row to L2 norm <= `clip_norm` (rows already inside are unchanged), in float64."""
    latents = latents.double()
    norms = latents.norm(dim=1, keepdim=True)
    return latents * torch.clamp(clip_norm / norms.clamp_min(torch.finfo(torch.float64).tiny), max=1.0)


def class_statistics(latents: torch.Tensor, labels: torch.Tensor, num_classes: int, clip_norm: float) -> np.ndarray:
    """Per class: sum of clipped latents, upper triangle of the sum of their outer products, and the count.

    Returns the unmasked ring vector in the wire layout (RING_DTYPE; `wire.from_ring` decodes it). The integer
    products and sums run in torch int64, whose two's-complement words are the ring's (numpy multiplies uint64
    matrices ~25x slower); the capacity bound keeps every entry below 2^50, so nothing wraps.
    """
    if labels.shape != (latents.shape[0],):
        raise ValueError(f"{latents.shape[0]} latents but labels of shape {tuple(labels.shape)}")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes - 1}, got {labels.min()}..{labels.max()}")
    check_capacity(latents.shape[0])
    q = torch.from_numpy(quantize_latents(clip_latents(latents, clip_norm).numpy(), clip_norm))
    labels = labels.cpu()
    per_class = [q[labels == c] for c in range(num_classes)]
    return join_fields(np.stack([q_c.sum(dim=0).numpy() for q_c in per_class]),
                       np.stack([upper_triangle((q_c.T @ q_c).numpy()) for q_c in per_class]),
                       np.array([q_c.shape[0] for q_c in per_class], dtype=np.int64)).view(RING_DTYPE)


def site_statistics(model: AutoencoderDC, images: torch.Tensor, labels: torch.Tensor, num_classes: int,
                    clip_norm: float) -> np.ndarray:
    """Encode a site's images (in [-1, 1]) and reduce them to the per-class statistics' ring vector."""
    return class_statistics(encode_latents(model, images), labels, num_classes, clip_norm)
