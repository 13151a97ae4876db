"""Does the site's data loader keep a CUDA GPU busy? BraTS-size cases: loader throughput alone vs the training step
alone vs both together, for several loader worker counts (the site's `loader_workers`).

Synthetic glioma cases of the BraTS size (4 x 240 x 240 x 155, NIfTI) are written to a temporary folder and read
once into the site's cache (`load_site_data`, memory cache); then, at the BraTS ROI:

- loader: batches/s of `SiteData.train_loader` alone (random crop, flips, intensity jitter, collation), no GPU work;
- step: batches/s of the site's `train_epochs` on batches already on the GPU (the GPU's own speed);
- together: batches/s of `train_epochs` over the loader as the site task runs it (prefetching thread, pinned memory).

The loader is not the bottleneck when together / step >= 0.95 (and loader / step >= 1). Exits with status 2 and a
message where there is no CUDA GPU.

    python bench/gpu/loader_vs_step.py [--cases 8 --workers 0 4 8 --epochs 3 --roi 224 224 144 --batch 1]
        [--write-readme]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from cuda_only import NO_CUDA, publish, require_cuda, timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=8, help="cases written (one is kept for validation)")
    parser.add_argument("--shape", type=int, nargs=3, default=[240, 240, 155])
    parser.add_argument("--roi", type=int, nargs=3, default=[224, 224, 144])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 4, 8])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--filters", type=int, default=16)
    parser.add_argument("--write-readme", action="store_true", help="also put the table into bench/README.md")
    args = parser.parse_args()
    device = require_cuda(__file__)
    if device is None:
        return NO_CUDA

    from fl_contract.job_params import SegmentationParams
    from fl_contract.models.segmentation import segresnet
    from fl_contract.precision import select_precision
    from site_agent.data.demo.synthetic_brats import write_brats_site
    from site_agent.segmentation.data import load_site_data
    from site_agent.segmentation.training import train_epochs

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        write_brats_site(Path(tmp), 1, n_cases=args.cases, shape=tuple(args.shape), layout="nifti")
        written = time.perf_counter() - start
        start = time.perf_counter()
        recipe = SegmentationParams(roi_size=tuple(args.roi), val_fraction=1 / args.cases, test_fraction=0.0)
        data = load_site_data(Path(tmp), recipe.case_recipe())
        cached = time.perf_counter() - start
    steps = args.epochs * -(-len(data.split.train) // args.batch)

    def network() -> torch.nn.Module:
        torch.manual_seed(0)
        return segresnet(init_filters=args.filters).to(device)

    def optimizer(net: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5)

    def step_alone() -> float:
        """Batches/s of the training step on batches already on the GPU (one epoch's, cycled)."""
        on_gpu = [{k: b[k].to(device) for k in ("image", "label")} for b in data.train_loader(args.batch, 0)]
        net = network()
        train_epochs(net, on_gpu, optimizer(net), device, epochs=1)  # warm-up: cuDNN autotuning
        cycled = [on_gpu[i % len(on_gpu)] for i in range(steps)]
        return float(steps / timed(lambda: train_epochs(net, cycled, optimizer(net), device, epochs=1))[0])

    step_rate = step_alone()

    rows = []
    for workers in args.workers:
        start = time.perf_counter()
        for epoch in range(args.epochs):
            for _ in data.train_loader(args.batch, epoch, workers=workers):
                pass
        loader_rate = steps / (time.perf_counter() - start)
        net = network()
        train_epochs(net, data.train_loader(args.batch, 99, workers=workers, prefetch=True), optimizer(net), device, 1)

        def together(net: torch.nn.Module = net, workers: int = workers) -> None:
            for epoch in range(args.epochs):
                train_epochs(net, data.train_loader(args.batch, epoch, workers=workers, prefetch=True), optimizer(net),
                             device, epochs=1)

        rows.append((workers, loader_rate, steps / timed(together)[0]))

    lines = [f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}; {args.cases} synthetic cases "
             f"{args.shape} (written in {written:.0f} s, read and cached in {cached:.0f} s), ROI {args.roi}, batch "
             f"{args.batch}, {len(data.split.train)} training cases x {args.epochs} epochs = {steps} steps, "
             f"{select_precision(device).describe()}, {torch.get_num_threads()} CPU threads; training step alone "
             f"(batches on the GPU): {step_rate:.2f} batches/s",
             "", "| loader workers | loader alone (batches/s) | loader / step | loader + training (batches/s) | "
             "together / step |", "| ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {workers} | {loader_rate:.2f} | {loader_rate / step_rate:.2f} | {together_rate:.2f} | "
              f"{together_rate / step_rate:.3f} |" for workers, loader_rate, together_rate in rows]
    publish("gpu_loader_vs_step", "\n".join(lines), args.write_readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
