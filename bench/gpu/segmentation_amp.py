"""SegResNet (BraTS configuration) at the BraTS ROI with AMP on a CUDA GPU: our training loop vs the bare MONAI loop.

Both loops train the same network from the same seed on the same in-memory batches (random 4-channel volumes and
TC/WT/ET masks of the ROI size, batch 1, so that data loading is out of the picture) and report images/s and peak
GPU memory; the ratio is ours / bare (goal <= 1.10 in time, about 1.0 in memory). Refuses to run without CUDA.

    python bench/gpu/segmentation_amp.py [--roi 224 224 144 --steps 20 --warmup 3 --filters 16]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch
from monai.losses import DiceLoss
from monai.networks.nets import SegResNet

from site_agent.segmentation.training import train_epochs


def _batches(roi: list[int], n: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator(device="cpu").manual_seed(0)
    return [{"image": torch.randn(1, 4, *roi, generator=generator).to(device),
             "label": (torch.rand(1, 3, *roi, generator=generator) > 0.9).float().to(device)} for _ in range(n)]


def _bare_monai(net: SegResNet, batches: list[dict[str, torch.Tensor]], device: torch.device) -> None:
    """MONAI's BraTS tutorial loop: autocast + GradScaler."""
    loss_fn = DiceLoss(smooth_nr=0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5)
    scaler = torch.amp.GradScaler("cuda")
    net.train()
    for batch in batches:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = loss_fn(net(batch["image"]), batch["label"])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def _ours(net: SegResNet, batches: list[dict[str, torch.Tensor]], device: torch.device) -> None:
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5)
    train_epochs(net, batches, optimizer, device, epochs=1)


def _measure(loop: Callable, args: argparse.Namespace, device: torch.device, batches: list) -> tuple[float, float]:
    torch.manual_seed(0)
    net = SegResNet(blocks_down=(1, 2, 2, 4), blocks_up=(1, 1, 1), init_filters=args.filters, in_channels=4,
                    out_channels=3, dropout_prob=0.2).to(device)
    loop(net, batches[: args.warmup], device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loop(net, batches[args.warmup :], device)
    torch.cuda.synchronize()
    return args.steps / (time.perf_counter() - start), torch.cuda.max_memory_allocated() / 2**30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roi", type=int, nargs=3, default=[224, 224, 144])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--filters", type=int, default=16)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu/segmentation_amp.py needs a CUDA GPU and a CUDA build of torch; none is visible here "
              f"(torch {torch.__version__}). Nothing was measured.", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    batches = _batches(args.roi, args.warmup + args.steps, device)
    results = {}
    for name, loop in (("bare MONAI AMP", _bare_monai), ("ours (train_epochs)", _ours), ("bare MONAI AMP (again)", _bare_monai)):
        results[name] = _measure(loop, args, device, batches)
    base = results["bare MONAI AMP"][0]
    print(f"{torch.cuda.get_device_name(device)}, ROI {args.roi}, init_filters {args.filters}, batch 1, {args.steps} steps\n")
    print("| loop | images/s | time ratio to bare | peak memory (GiB) |\n| --- | ---: | ---: | ---: |")
    for name, (rate, memory) in results.items():
        print(f"| {name} | {rate:.2f} | {base / rate:.2f}x | {memory:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
