"""SegResNet (BraTS configuration) training at the BraTS ROI on a CUDA GPU: the site's training step vs the bare
MONAI AMP loop, images/s and peak GPU memory, and the site's memory estimate beside the measured peak.

All loops train the same network from the same seed on the same two batches already on the GPU, cycled (random
4-channel volumes and TC/WT/ET masks of the ROI size; the peak memory includes both), so data loading is out of the
picture (`loader_vs_step.py` measures
it). Loops: the site's `train_epochs` (precision from fl_contract.precision: bfloat16 without a scaler on compute
capability >= 8.0), the bare loop in that same precision, and MONAI's BraTS tutorial loop as written (float16
autocast + GradScaler). Bare loops are measured before and after ours; the ratio is ours / the bare loop in the
same precision (goal >= 0.95). Exits with status 2 and a message where there is no CUDA GPU.

    python bench/gpu/segmentation_amp.py [--roi 224 224 144 --batch 1 --steps 20 --warmup 3 --filters 16]
        [--write-readme]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from cuda_only import NO_CUDA, publish, require_cuda, timed

Batches = list[dict[str, torch.Tensor]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roi", type=int, nargs=3, default=[224, 224, 144])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--filters", type=int, default=16)
    parser.add_argument("--write-readme", action="store_true", help="also put the table into bench/README.md")
    args = parser.parse_args()
    device = require_cuda(__file__)
    if device is None:
        return NO_CUDA

    from monai.losses import DiceLoss

    from fl_contract.labels import REGIONS
    from fl_contract.models.segmentation import segresnet
    from fl_contract.precision import select_precision
    from site_agent.segmentation.memory import GIB, estimate_training_memory
    from site_agent.segmentation.training import train_epochs

    precision = select_precision(device)
    dtype = precision.autocast_dtype or torch.float32

    def bare(autocast_dtype: torch.dtype, scaled: bool) -> Callable[[torch.nn.Module, Batches], None]:
        """MONAI's BraTS tutorial loop (DiceLoss, Adam, autocast, GradScaler when `scaled`)."""

        def loop(net: torch.nn.Module, batches: Batches) -> None:
            loss_fn = DiceLoss(smooth_nr=0, smooth_dr=1e-5, squared_pred=True, to_onehot_y=False, sigmoid=True)
            optimizer = torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5)
            scaler = torch.amp.GradScaler("cuda", enabled=scaled)
            net.train()
            for batch in batches:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=autocast_dtype):
                    loss = loss_fn(net(batch["image"]), batch["label"])
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                float(loss)  # the tutorial logs every step's loss, as train_epochs sums it

        return loop

    def ours(net: torch.nn.Module, batches: Batches) -> None:
        train_epochs(net, batches, torch.optim.Adam(net.parameters(), lr=1e-4, weight_decay=1e-5), device, epochs=1)

    def network() -> torch.nn.Module:
        torch.manual_seed(0)
        return segresnet(init_filters=args.filters).to(device)

    generator = torch.Generator().manual_seed(0)
    pool = [{"image": torch.randn(args.batch, 4, *args.roi, generator=generator).to(device),
             "label": (torch.rand(args.batch, len(REGIONS), *args.roi, generator=generator) > 0.9).float().to(device)}
            for _ in range(2)]
    batches = [pool[i % 2] for i in range(args.warmup + args.steps)]  # two batches in GPU memory, cycled
    same = f"bare MONAI loop, {precision.name}{' + GradScaler' if precision.uses_scaler else ''}"
    loops = [(same, bare(dtype, precision.uses_scaler)), (f"site train_epochs ({precision.describe()})", ours),
             (same + " (again)", bare(dtype, precision.uses_scaler))]
    if dtype != torch.float16:
        loops.append(("MONAI BraTS tutorial as written: float16 + GradScaler", bare(torch.float16, True)))
    def measure(loop: Callable[[torch.nn.Module, Batches], None]) -> tuple[float, float]:
        net = network()
        loop(net, batches[: args.warmup])
        seconds, memory = timed(lambda: loop(net, batches[args.warmup :]))
        return args.steps * args.batch / seconds, memory

    rows = []
    for name, loop in loops:
        rows.append((name, *measure(loop)))
        torch.cuda.empty_cache()
    estimate = estimate_training_memory(segresnet(init_filters=args.filters), len(REGIONS), precision)
    reference = (rows[0][1] + rows[2][1]) / 2

    lines = [f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}; SegResNet "
             f"init_filters {args.filters}, ROI {args.roi}, batch {args.batch}, {args.steps} steps after {args.warmup}",
             "", "| loop | images/s | ratio to the bare loop in the site's precision | peak memory (GiB) |",
             "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {rate:.2f} | {rate / reference:.3f} | {memory:.2f} |" for name, rate, memory in rows]
    lines += ["", f"Site memory estimate at task start (site_agent.segmentation.memory): "
              f"{estimate.total(args.batch, args.roi) / GIB:.2f} GiB; measured peak {rows[1][2]:.2f} GiB."]
    publish("gpu_segmentation_amp", "\n".join(lines), args.write_readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
