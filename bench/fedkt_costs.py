"""FedKT-CSD costs: the site's statistics pass vs a bare encoder forward, and the server's release time vs sites.

    .venv/bin/python bench/fedkt_costs.py [--autoencoder FOLDER] [--images 128] [--repeats 5]

1. Site: `site_statistics` (encode + clip + fixed point + per-class sums) vs `model.encode(x).latent` alone, on the
   same decoded images, interleaved, median of `repeats` (goal: ratio <= 1.02), and the encoder's achieved FLOP/s
   as a fraction of this machine's fp32 matrix-multiply rate (torch.mm 2048^2, best of 5) in the same run.
2. Secure aggregation with dropout recovery, run in-process for 10, 30 and 100 sites (d = 128, 10 classes), one
   site lost after sharing its keys: one site's time to share (Shamir split + one encryption per peer) and to mask
   (one keystream per peer), and the server's time to unmask (rebuild every survivor's self-mask seed and the lost
   site's mask key from t shares, remove their masks) and then decode and release.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from fl_contract.fedkt_csd.wire import from_ring
from fl_contract.models.dcae import build_tiny_dcae, load_autoencoder, to_autoencoder_range
from fl_contract.ring import MIN_MASKED_SITES
from jobs.fedkt_csd.spec import FedKTCSDParams
from server_app.fedkt_release import release_class_gaussians
from server_app.privacy.dp_calibration import calibrate_noise
from server_app.privacy.secure_aggregation import Revealed, SecureAggregation
from site_agent.fedkt_csd.demo_autoencoder import public_images
from site_agent.fedkt_csd.stats import class_statistics, encode_latents, site_statistics
from site_agent.secure_aggregation.protocol import SecureAggregationSite

D, CLASSES, R = 128, 10, 34.0
T = TypeVar("T")


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
            "encoder_gflop_per_image": flops_per_image / 1e9,
            "encoder_gflops": flops_per_image * n_images / t_bare / 1e9,
            "matmul_gflops": peak / 1e9, "fraction_of_peak": flops_per_image * n_images / t_bare / peak}


def secure_aggregation(num_sites: int, rng: np.random.Generator) -> dict[str, float]:
    """Seconds for site-0000's share and mask steps and for the server's unmask and release; one site lost."""
    latents = torch.from_numpy(rng.normal(0, 3, (num_sites * 20, D)))
    labels = torch.arange(num_sites * 20) % CLASSES
    vectors = {f"site-{i:04d}": class_statistics(latents[i::num_sites], labels[i::num_sites], CLASSES, R)
               for i in range(num_sites)}
    sites = {name: SecureAggregationSite(name, "bench", MIN_MASKED_SITES) for name in vectors}
    server = SecureAggregation("bench", MIN_MASKED_SITES)
    server.start({name: site.advertised for name, site in sites.items()})
    timed: dict[str, float] = {}
    shares = {name: _timed(timed, "share", lambda site=site: site.share(server.keys, server.threshold), name)
              for name, site in sites.items()}
    relayed = server.relay(shares)
    lost = sorted(sites)[-1]
    masked = {name: _timed(timed, "mask", lambda name=name: sites[name].mask(
        vectors[name], server.sharing,
        {k.split("/")[0]: v for k, v in relayed.items() if k.endswith("/" + name)}), name)
        for name in server.sharing if name != lost}
    server.collect(masked)
    revealed = {name: Revealed(*sites[name].reveal(server.survivors, server.dropped)) for name in server.survivors}
    calibration = calibrate_noise(10.0, 1e-5, R)
    started = time.perf_counter()
    total = server.unmask(masked, revealed)
    timed["unmask"] = time.perf_counter() - started
    started = time.perf_counter()
    release_class_gaussians(from_ring(total, CLASSES, R), calibration, noise_seed=0,
                            min_count=FedKTCSDParams().min_count, covariance=FedKTCSDParams().covariance)
    timed["release"] = time.perf_counter() - started
    assert np.array_equal(total, np.sum([vectors[n] for n in server.survivors], axis=0, dtype=np.uint64))
    return timed


def _timed(into: dict[str, float], key: str, step: Callable[[], T], site: str) -> T:
    """Run `step`; keep its time under `key` if it is site-0000's."""
    started = time.perf_counter()
    result = step()
    if site == "site-0000":
        into[key] = time.perf_counter() - started
    return result


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
    print("\n| sites (one lost after sharing) | threshold | one site: share (s) | one site: mask (s) "
          "| server: unmask (s) | server: decode + DP release (s) |\n|---|---|---|---|---|---|")
    for n in (10, 30, 100):
        t = secure_aggregation(n, rng)
        print(f"| {n} | {n // 2 + 1} | {t['share']:.3f} | {t['mask']:.3f} | {t['unmask']:.3f} | {t['release']:.3f} |")


if __name__ == "__main__":
    main()
