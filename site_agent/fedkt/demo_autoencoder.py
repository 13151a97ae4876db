"""A small demo DC-AE trained on public synthetic lesions, saved exactly like a published checkpoint.

The real federation uses a published DC-AE (e.g. dc-ae-f32c32-in-1.0) downloaded once. For demos and tests we
train the tiny AutoencoderDC (same (32, 2, 2) latent for 64x64 input, d = 128) for a minute on CPU, on synthetic
ISIC-style images drawn with a public seed that no demo site uses. Without regularisation a small autoencoder's
latents drift to huge norms (ALGORITHMS.md), so the loss adds `latent_weight` x mean(z^2). The clip norm R is the
median latent norm on these public images, fixed before any site data is seen and saved in clip_norm.json.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from diffusers import AutoencoderDC

from fl_contract.classes import TRAINING_CLASSES
from fl_contract.models.dcae import build_tiny_dcae, save_autoencoder, to_autoencoder_range
from site_agent.data.isic import read_isic_site
from site_agent.data.synthetic_isic import write_isic_site
from site_agent.fedkt.site_data import read_images
from site_agent.fedkt.stats import encode_latents

PUBLIC_SEED = 20_240_607  # the public image set; demo sites use small seeds
LATENT_WEIGHT = 1e-3


def public_images(n_images: int, image_size: int = 64, seed: int = PUBLIC_SEED) -> torch.Tensor:
    """(N, 3, S, S) synthetic lesions of all eight training classes, in [0, 1], from the public seed."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_isic_site(Path(tmp), 1, 1, n_images, TRAINING_CLASSES, alpha=100.0, size=image_size, seed=seed)
        return read_images(read_isic_site(folder, TRAINING_CLASSES), image_size).images


def train_autoencoder(images: torch.Tensor, steps: int, batch_size: int = 16, learning_rate: float = 2e-3,
                      latent_weight: float = LATENT_WEIGHT, seed: int = 0) -> AutoencoderDC:
    """Adam on reconstruction MSE + `latent_weight` * mean(z^2), images in [0, 1]; returns the model in eval mode."""
    model = build_tiny_dcae(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    x_all = to_autoencoder_range(images)
    model.train()
    for _ in range(steps):
        x = x_all[torch.randint(len(x_all), (batch_size,), generator=generator)]
        z = model.encode(x).latent
        loss = torch.nn.functional.mse_loss(model.decode(z).sample, x) + latent_weight * z.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def median_latent_norm(model: AutoencoderDC, images: torch.Tensor) -> float:
    """The clip norm R: median L2 norm of the latents of public images in [0, 1]."""
    return float(encode_latents(model, to_autoencoder_range(images)).norm(dim=1).median())


def train_demo_autoencoder(out: Path, n_images: int = 256, steps: int = 120, batch_size: int = 16,
                           seed: int = 0) -> Path:
    """Train, fix R from the public images, and save `out` (config.json, safetensors weights, clip_norm.json)."""
    started = time.monotonic()
    images = public_images(n_images)
    model = train_autoencoder(images, steps, batch_size, seed=seed)
    clip_norm = median_latent_norm(model, images)
    provenance = (f"median latent norm of {n_images} public synthetic ISIC-style images (seed {PUBLIC_SEED}), 64x64 in "
                  f"[-1, 1]; tiny AutoencoderDC trained {steps} steps (batch {batch_size}, latent weight "
                  f"{LATENT_WEIGHT}, seed {seed}) in {time.monotonic() - started:.0f} s")
    return save_autoencoder(model, Path(out), clip_norm, provenance)
