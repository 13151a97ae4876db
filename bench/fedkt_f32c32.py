"""The published DC-AE f32c32 architecture through the site's statistics path vs the bare diffusers encoder, on CPU.

    .venv/bin/python bench/fedkt_f32c32.py [--images 64 --repeats 3 --write-readme]

The dc-ae-f32c32-in-1.0 configuration (as in diffusers' conversion script,
https://github.com/huggingface/diffusers/blob/main/scripts/convert_dcae_to_diffusers.py) is built here with
random weights: the cost does not depend on them, and nothing is downloaded. On the same 64x64 images in [-1, 1]:

- bare encoder: `model.encode(batch).latent` over batches of 32 (the site's batch size) under inference mode;
- site statistics path: `site_statistics` (encode in fixed batches of 32 with deterministic kernels, clip, fixed
  point, per-class sums and outer products), what a site runs on its images;

interleaved, alternating which goes first; images/s from the best of `repeats` runs (the least disturbed by other
load), the time ratio from the best and from the medians. The encoder's FLOPs per image are counted with torch's
FlopCounterMode; the bare encoder's best rate is compared with a large fp32 torch.matmul (4096^2, best of 5) and with
a 3x3 convolution of the encoder's kind (512 channels at 16x16, batch 32; oneDNN), both timed in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from diffusers import AutoencoderDC
from fedkt_costs import matmul_flops
from readme_section import write_section
from torch.utils.flop_counter import FlopCounterMode

from fl_contract.models.dcae import f32c32_config, to_autoencoder_range
from site_agent.fedkt_csd.demo_autoencoder import public_images
from site_agent.fedkt_csd.stats import ENCODE_BATCH_SIZE, site_statistics

CLASSES, R = 4, 34.0  # R: the reference's clip norm for f32c32-in


def _seconds(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def conv_gflops(channels: int = 512, side: int = 16, batch: int = 32, repeats: int = 5) -> float:
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
    x = torch.randn(batch, channels, side, side)
    with torch.inference_mode():
        conv(x)
        best = min(_seconds(lambda: conv(x)) for _ in range(repeats))
    return 2 * 9 * channels**2 * side**2 * batch / best / 1e9


def bare_encode(model: AutoencoderDC, x: torch.Tensor) -> None:
    with torch.inference_mode():
        for batch in x.split(ENCODE_BATCH_SIZE):
            model.encode(batch)


def measure(n_images: int, repeats: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = AutoencoderDC(**f32c32_config()).eval().requires_grad_(False)
    x = to_autoencoder_range(public_images(n_images, seed=1))
    labels = torch.arange(n_images) % CLASSES
    runs: dict[str, list[float]] = {"bare": [], "site": []}
    paths = {"bare": lambda: bare_encode(model, x), "site": lambda: site_statistics(model, x, labels, CLASSES, R)}
    bare_encode(model, x[:ENCODE_BATCH_SIZE])  # warm-up (oneDNN primitive creation)
    for i in range(repeats):
        for name in ("bare", "site") if i % 2 == 0 else ("site", "bare"):
            runs[name].append(_seconds(paths[name]))
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model.encode(x[:1])
    flop_per_image = counter.get_total_flops()
    bare, site = min(runs["bare"]), min(runs["site"])
    achieved = flop_per_image * n_images / bare / 1e9
    matmul, conv = matmul_flops(size=4096) / 1e9, conv_gflops()
    return {"params_m": sum(p.numel() for p in model.parameters()) / 1e6,
            "encoder_params_m": sum(p.numel() for p in model.encoder.parameters()) / 1e6,
            "images": n_images, "repeats": repeats, "bare_ips": n_images / bare, "site_ips": n_images / site,
            "ratio": site / bare, "median_ratio": statistics.median(runs["site"]) / statistics.median(runs["bare"]),
            "gflop_per_image": flop_per_image / 1e9, "gflops": achieved,
            "matmul_gflops": matmul, "fraction_matmul": achieved / matmul, "conv_gflops": conv,
            "fraction_conv": achieved / conv}


def table(m: dict[str, Any]) -> str:
    return "\n".join([
        f"dc-ae-f32c32-in-1.0 architecture, random weights: {m['params_m']:.1f}M parameters "
        f"({m['encoder_params_m']:.1f}M in the encoder); {m['images']} images of 64x64, "
        f"best of {m['repeats']} interleaved runs; torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}.",
        "",
        "| bare encoder (images/s) | site statistics path (images/s) | time ratio site / bare, best (median) "
        "| encoder GFLOP/image | encoder GFLOP/s | fp32 matmul GFLOP/s | fraction of matmul peak | 3x3 conv GFLOP/s "
        "| fraction of conv rate |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {m['bare_ips']:.2f} | {m['site_ips']:.2f} | {m['ratio']:.3f} ({m['median_ratio']:.3f}) "
        f"| {m['gflop_per_image']:.2f} | {m['gflops']:.1f} "
        f"| {m['matmul_gflops']:.1f} | {m['fraction_matmul']:.2f} "
        f"| {m['conv_gflops']:.1f} | {m['fraction_conv']:.2f} |",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64, help="a multiple of 32 keeps the site path free of padding")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    text = table(measure(args.images, args.repeats))
    print(text)
    if args.write_readme:
        write_section("fedkt_f32c32", text)


if __name__ == "__main__":
    main()
