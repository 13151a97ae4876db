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

from fl_contract.fedkt_csd.wire import check_capacity, join_fields, quantize_latents, upper_triangle
from fl_contract.precision import select_precision
from fl_contract.ring import RING_DTYPE

ENCODE_BATCH_SIZE = 32
"""The batch every latent is encoded in on a CPU (see encode_latents)."""
CUDA_ENCODE_BATCH_SIZE = 256
"""The default batch on a GPU: enough images to keep it busy at 64 x 64, far below its memory (the site's
`encode_batch_size` overrides it)."""
_DEVICE_UPLOAD_FRACTION = 0.25


def default_encode_batch_size(device: torch.device) -> int:
    return CUDA_ENCODE_BATCH_SIZE if device.type == "cuda" else ENCODE_BATCH_SIZE


def encode_latents(model: AutoencoderDC, images: torch.Tensor, batch_size: int | None = None) -> torch.Tensor:
    """(N, 3, H, W) images in [-1, 1] -> (N, d) flattened latents `model.encode(x).latent`, float32 on CPU.

    Every batch holds exactly `batch_size` images (default: the device's, `default_encode_batch_size`; the last
    batch padded with zeros) and runs with deterministic kernels, so an image's latent has the same bits however
    many images its site holds: CPU kernels take other code paths for other batch sizes (batches of 1 or 3 differ
    from 32 by up to ~4e-5), and that would move a latent across a fixed-point grid line now and then, breaking the
    partition invariance of the sums. On a GPU the encoder runs in the site's precision (fl_contract.precision:
    bfloat16 where supported); the latents leave it as float32, and everything after (clipping, fixed point, sums)
    is the same exact float64 and integer arithmetic as on the CPU. The images go to the GPU in one copy when they
    take at most a quarter of its free memory, so no batch waits for a transfer.
    """
    if images.ndim != 4 or images.shape[1] != model.config.in_channels:
        raise ValueError(f"expected images (N, {model.config.in_channels}, H, W), got {tuple(images.shape)}")
    if images.shape[0] == 0:
        raise ValueError("no images to encode")
    if images.min() < -1.0 or images.max() > 1.0:
        raise ValueError("images must be scaled to [-1, 1] (use fl_contract.models.dcae.to_autoencoder_range)")
    device = next(model.parameters()).device
    batch_size = batch_size or default_encode_batch_size(device)
    if device.type == "cuda" and images.nbytes <= _DEVICE_UPLOAD_FRACTION * torch.cuda.mem_get_info(device)[0]:
        images = images.to(device)
    precision = select_precision(device)
    latents = []
    with torch.inference_mode(), _deterministic_kernels(), precision.autocast():
        for batch in images.split(batch_size):
            if len(batch) < batch_size:
                batch = torch.cat([batch, batch.new_zeros(batch_size - len(batch), *batch.shape[1:])])
            encoded = model.encode(batch.to(device)).latent
            latents.append(encoded.flatten(1).float())
    return torch.cat(latents)[: len(images)].cpu()


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
                    clip_norm: float, encode_batch_size: int | None = None) -> np.ndarray:
    """Encode a site's images (in [-1, 1]) and reduce them to the per-class statistics' ring vector."""
    return class_statistics(encode_latents(model, images, encode_batch_size), labels, num_classes, clip_norm)
