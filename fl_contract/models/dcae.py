"""The frozen DC-AE (diffusers `AutoencoderDC`) used by FedKT-CSD, loaded only from a local folder.

A hospital downloads the autoencoder once and gives its folder; nothing is fetched at run time. The clip norm R
is a property of the autoencoder, fixed from public images before any site data is seen, and stored beside its
weights in `clip_norm.json`: choosing R from a site's own latents would itself leak. The folder name and the
sha256 of the weights file identify the autoencoder for the privacy officer and the release manifest.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderDC

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
CLIP_NORM_FILE = "clip_norm.json"


@dataclass(frozen=True)
class AutoencoderIdentity:
    """What the privacy officer needs to pin the exact autoencoder a job used."""

    name: str
    weights_sha256: str
    clip_norm: float
    clip_norm_provenance: str

    def manifest(self) -> dict[str, Any]:
        return {"name": self.name, "weights_sha256": self.weights_sha256, "clip_norm": self.clip_norm,
                "clip_norm_provenance": self.clip_norm_provenance}


@dataclass(frozen=True)
class LoadedAutoencoder:
    """An autoencoder in eval mode with frozen weights, its clip norm R, and its identity."""

    model: AutoencoderDC
    clip_norm: float
    identity: AutoencoderIdentity


def tiny_dcae_config() -> dict[str, Any]:
    """A ~200k-parameter AutoencoderDC with the f32c32 latent shape, (32, 2, 2) for 64x64 input; for tests."""
    block_types = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
    channels = (8, 8, 16, 16, 32, 32)
    return {
        "in_channels": 3, "latent_channels": 32, "attention_head_dim": 8,
        "encoder_block_types": block_types, "decoder_block_types": block_types,
        "encoder_block_out_channels": channels, "decoder_block_out_channels": channels,
        "encoder_layers_per_block": (1,) * 6, "decoder_layers_per_block": (1,) * 6,
        "encoder_qkv_multiscales": ((),) * 6, "decoder_qkv_multiscales": ((),) * 6,
    }


def f32c32_config() -> dict[str, Any]:
    """The AutoencoderDC arguments of the published dc-ae-f32c32-in-1.0 (diffusers' conversion script,
    https://github.com/huggingface/diffusers/blob/main/scripts/convert_dcae_to_diffusers.py):
    to build it with random weights where only its size matters (GPU benchmarks), never to replace its weights."""
    block_types = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
    channels = (128, 256, 512, 512, 1024, 1024)
    return {
        "in_channels": 3, "latent_channels": 32, "attention_head_dim": 32, "scaling_factor": 0.3189,
        "encoder_block_types": block_types, "decoder_block_types": block_types,
        "encoder_block_out_channels": channels, "decoder_block_out_channels": channels,
        "encoder_layers_per_block": (0, 4, 8, 2, 2, 2), "decoder_layers_per_block": (0, 5, 10, 2, 2, 2),
        "encoder_qkv_multiscales": ((),) * 6, "decoder_qkv_multiscales": ((),) * 6,
        "decoder_norm_types": ("batch_norm",) * 3 + ("rms_norm",) * 3,
        "decoder_act_fns": ("relu",) * 3 + ("silu",) * 3,
    }


def build_tiny_dcae(seed: int = 0) -> AutoencoderDC:
    """The tiny test autoencoder with weights drawn from `torch.manual_seed(seed)` (meaningless images)."""
    torch.manual_seed(seed)
    return AutoencoderDC(**tiny_dcae_config())


def latent_shape(model: AutoencoderDC, image_size: int) -> tuple[int, int, int]:
    """(channels, height, width) of the latent of a square `image_size` image."""
    ratio = model.spatial_compression_ratio
    if image_size % ratio:
        raise ValueError(f"image size {image_size} is not a multiple of the autoencoder's compression ratio {ratio}")
    return (model.config.latent_channels, image_size // ratio, image_size // ratio)


def to_autoencoder_range(images: torch.Tensor) -> torch.Tensor:
    """Map images in [0, 1] to the autoencoder's input range [-1, 1]."""
    return images * 2.0 - 1.0


def from_autoencoder_range(images: torch.Tensor) -> torch.Tensor:
    """Map decoder output back to [0, 1], clamping what the decoder puts outside [-1, 1]."""
    return ((images + 1.0) / 2.0).clamp(0.0, 1.0)


def save_autoencoder(model: AutoencoderDC, folder: Path, clip_norm: float, provenance: str) -> Path:
    """Write the model (`save_pretrained`) and `clip_norm.json` so that `load_autoencoder(folder)` accepts it.

    `provenance` says how R was derived from public images (data set, statistic), for the privacy officer.
    """
    _check_clip_norm(clip_norm, folder)
    if not provenance.strip():
        raise ValueError("say how the clip norm was derived from public images (provenance is empty)")
    folder = Path(folder)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / CLIP_NORM_FILE).write_text(json.dumps({"clip_norm": clip_norm, "provenance": provenance}, indent=2))
    return folder


def load_autoencoder(folder: str | Path, device: torch.device | str = "cpu") -> LoadedAutoencoder:
    """Load a local DC-AE folder, frozen and in eval mode on `device`; refuse anything that would need a download."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} is not a local folder. FedKT-CSD never downloads models: download the autoencoder once on a "
            f"machine with internet (e.g. `huggingface-cli download mit-han-lab/dc-ae-f32c32-in-1.0-diffusers "
            f"--local-dir DIR`), add {CLIP_NORM_FILE}, and give the folder DIR")
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE, CLIP_NORM_FILE) if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}: give a folder written by diffusers' `save_pretrained` "
            f"({CONFIG_FILE} + {WEIGHTS_FILE}, safetensors only) with {CLIP_NORM_FILE} beside it "
            f'({{"clip_norm": R, "provenance": "how R was derived from public images"}})')
    clip_norm, provenance = _read_clip_norm(folder / CLIP_NORM_FILE)
    # low_cpu_mem_usage=True would need `accelerate`, which the agent does not depend on
    model = AutoencoderDC.from_pretrained(folder, local_files_only=True, use_safetensors=True, low_cpu_mem_usage=False)
    model.requires_grad_(False).eval().to(device)
    identity = AutoencoderIdentity(folder.resolve().name, _sha256(folder / WEIGHTS_FILE), clip_norm, provenance)
    return LoadedAutoencoder(model, clip_norm, identity)


def _read_clip_norm(path: Path) -> tuple[float, str]:
    try:
        record = json.loads(path.read_text())
        clip_norm, provenance = float(record["clip_norm"]), str(record["provenance"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f'{path}: expected {{"clip_norm": R, "provenance": "..."}} ({err})') from err
    _check_clip_norm(clip_norm, path)
    return clip_norm, provenance


def _check_clip_norm(clip_norm: float, where: Path) -> None:
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"{where}: clip norm must be a finite positive number, got {clip_norm}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
