"""Benchmark: PLayer-FL's one-off sensitivity pass vs one local training epoch, at one site (goal: < 5%).

Both use the site task's own functions on the same synthetic ISIC-format site, interleaved: an epoch is
`train_epochs` over the training split (JPEG decoding and augmentation included, as at a real site); the sensitivity
pass draws one fresh batch and runs `federation_sensitivity` on it. The pass costs about one training step, so its
share of an epoch falls with the number of batches per epoch; the table reports both.

    .venv/bin/python bench/playerfl_sensitivity_cost.py [--images 4000 --size 64 --batch-size 128 --repeats 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from fl_contract.models import build_model
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.playerfl.data import IsicImages, load_site_splits
from site_agent.playerfl.sensitivity import federation_sensitivity
from site_agent.playerfl.training import adam, focal_loss, train_epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4000, help="images at the site (64%% are used for training)")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_isic_site(Path(tmp), 1, n_sites=1, n_images=args.images, size=args.size)
        train = IsicImages(load_site_splits(folder, seed=0).train, args.size, augment=True)
        model = build_model("cnn5")
        optimizer = adam(model, 1e-3, 1e-4)
        loss_fn = focal_loss(1.0)
        epochs, passes = [], []
        for _repeat in range(args.repeats):
            start = time.perf_counter()
            train_epochs(model, DataLoader(train, batch_size=args.batch_size, shuffle=True), loss_fn, 1, optimizer)
            epochs.append(time.perf_counter() - start)
            start = time.perf_counter()
            images, labels = next(iter(DataLoader(train, batch_size=args.batch_size, shuffle=True)))
            federation_sensitivity(model, loss_fn, images, labels)
            passes.append(time.perf_counter() - start)
    batches = -(-len(train) // args.batch_size)
    epoch, sensitivity = statistics.median(epochs), statistics.median(passes)
    print(f"Site: {len(train)} training images of {args.size}x{args.size} ({batches} batches of {args.batch_size}), "
          f"reference CNN5; {args.repeats} interleaved repeats; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, "
          f"Python {platform.python_version()}.\n")
    print("| step | median (s) | share of one epoch |\n| --- | ---: | ---: |")
    print(f"| one local epoch | {epoch:.2f} | 100% |")
    print(f"| sensitivity pass (1 fresh batch) | {sensitivity:.2f} | {100 * sensitivity / epoch:.1f}% |")


if __name__ == "__main__":
    main()
