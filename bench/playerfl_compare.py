"""Benchmark: PLayer-FL vs FedAvg vs Local on the synthetic 4-site label-skewed federation, over several seeds.

Each (method, seed) is a real FLARE simulator run of the exported job (`jobs.playerfl.demo`); the report (median
over seeds, bootstrap 95% interval, plots) is written to OUT/report. The same synthetic sites serve every run; the
seed changes initial weights, data split, shuffling.

    .venv/bin/python bench/playerfl_compare.py OUT [--seeds 0 1 2 --rounds 10 --images 80 --size 32]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from jobs.playerfl.compare import DEMO_METHODS, run_playerfl_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(DEMO_METHODS))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--images", type=int, default=80, help="images per site")
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    start = time.perf_counter()
    report = run_playerfl_demo(args.out, methods=args.methods, seeds=args.seeds, images_per_site=args.images,
                               image_size=args.size, num_rounds=args.rounds)
    print(report.read_text())
    print(f"{len(args.methods) * len(args.seeds)} simulator runs in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
