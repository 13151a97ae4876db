"""FedKT-CSD costs: the site's statistics pass vs a bare encoder forward, and the server's release time vs sites.

    .venv/bin/python bench/fedkt_costs.py [--autoencoder FOLDER] [--images 128] [--repeats 5]

1. Site: `site_statistics` (encode + clip + fixed point + per-class sums) vs `model.encode(x).latent` alone, on the
   same decoded images, interleaved, median of `repeats` (goal: ratio <= 1.02), and the encoder's achieved FLOP/s
   as a fraction of this machine's fp32 matrix-multiply rate (torch.mm 2048^2, best of 5) in the same run.
2. Server: unmask_sum + decode + DP release for 10, 100 and 1000 sites' payloads (d = 128, 10 classes). The
   server's work does not depend on the mask values, so the payloads are unmasked fixed-point vectors; the
   per-site masking cost (one keystream per peer) is measured separately.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from fl_contract.fedkt.wire import from_ring
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, to_autoencoder_range
from jobs.fedkt_csd.spec import FedKTCSDParams
from server_app.fedkt_release import release_class_gaussians
from server_app.privacy.dp_calibration import calibrate_noise
from server_app.privacy.unmask import unmask_sum
from site_agent.fedkt.demo_autoencoder import public_images
from site_agent.fedkt.stats import class_statistics, encode_latents, site_statistics
from site_agent.secure_agg import generate_keypair, mask_vector

D, CLASSES, R = 128, 10, 34.0


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def matmul_flops(size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_median_time(lambda: torch.mm(a, b), 1) for _ in range(repeats))
    return 2 * size**3 / best


def site_pass(model: torch.nn.Module, n_images: int, repeats: int) -> dict[str, float]:
    x = to_autoencoder_range(public_images(n_images, seed=1))
    labels = torch.arange(n_images) % 4
    bare, stats = [], []
    site_statistics(model, x, labels, 4, R)  # warm-up
    for i in range(repeats):  # interleaved, alternating which goes first, so that load and warm-up hit both alike
        pair = [(bare, lambda: encode_latents(model, x)), (stats, lambda: site_statistics(model, x, labels, 4, R))]
        for times, fn in pair if i % 2 == 0 else pair[::-1]:
            times.append(_median_time(fn, 1))
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model.encode(x[:1])
    flops_per_image = counter.get_total_flops()
    peak = matmul_flops()
    t_bare, t_stats = statistics.median(bare), statistics.median(stats)
    return {"images": n_images, "bare_s": t_bare, "stats_s": t_stats, "ratio": t_stats / t_bare,
            "encoder_gflop_per_image": flops_per_image / 1e9, "encoder_gflops": flops_per_image * n_images / t_bare / 1e9,
            "matmul_gflops": peak / 1e9, "fraction_of_peak": flops_per_image * n_images / t_bare / peak}


def server_release(num_sites: int, rng: np.random.Generator) -> float:
    latents = torch.from_numpy(rng.normal(0, 3, (num_sites * 20, D)))
    labels = torch.arange(num_sites * 20) % CLASSES
    per_site = [class_statistics(latents[i::num_sites], labels[i::num_sites], CLASSES, R)
                for i in range(num_sites)]
    payloads = {f"site-{i:04d}": v for i, v in enumerate(per_site)}
    calibration = calibrate_noise(10.0, 1e-5, R)
    started = time.perf_counter()
    stats = from_ring(unmask_sum(payloads, payloads), CLASSES, R)
    release_class_gaussians(stats, calibration, noise_seed=0, min_count=FedKTCSDParams().min_count)
    return time.perf_counter() - started


def site_masking(num_peers: int) -> float:
    keys = {f"site-{i:04d}": generate_keypair() for i in range(num_peers + 1)}
    public = {site: pair[1] for site, pair in keys.items()}
    vector = np.zeros(CLASSES * (D + 1) * (D + 2) // 2, dtype=np.uint64)
    started = time.perf_counter()
    mask_vector(vector, "site-0000", keys["site-0000"][0], public, "bench")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autoencoder", type=Path, help="a DC-AE folder (default: the tiny demo architecture)")
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    model = load_autoencoder(args.autoencoder).model if args.autoencoder else build_tiny_dcae(0).eval()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    site = site_pass(model, args.images, args.repeats)
    print("| images | bare encoder forward (s) | statistics pass (s) | ratio | encoder GFLOP/image | encoder GFLOP/s "
          "| fp32 matmul GFLOP/s | fraction of matmul peak |\n|---|---|---|---|---|---|---|---|")
    print(f"| {site['images']} | {site['bare_s']:.3f} | {site['stats_s']:.3f} | {site['ratio']:.3f} | "
          f"{site['encoder_gflop_per_image']:.4f} | {site['encoder_gflops']:.2f} | {site['matmul_gflops']:.1f} | "
          f"{site['fraction_of_peak']:.4f} |")
    rng = np.random.default_rng(0)
    print("\n| sites | server unmask + decode + DP release (s) | per site (ms) | site masking, one site (s) |\n|---|---|---|---|")
    for n in (10, 100, 1000):
        seconds = server_release(n, rng)
        print(f"| {n} | {seconds:.3f} | {1000 * seconds / n:.2f} | {site_masking(n - 1):.3f} |")


if __name__ == "__main__":
    main()
