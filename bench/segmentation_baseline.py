"""Federated vs centralised segmentation on the same cases, over seeds: does federation cost anything?

FedAvg is our `brats-segmentation` job in FLARE's simulator (3 synthetic sites of CPU_DEMO_DATA, the CPU_DEMO
model and recipe, R rounds of E local epochs). Centralised training pools the same sites' training cases (each
site's own seeded split, so validation and test cases are the same ones) and trains the same network from the
same initial weights for R x E epochs with the site's own functions (`load_site_data`, `train_epochs`,
`score_cases`): one Adam, validation after every E epochs, the best model on the pooled validation cases scored
once on the pooled test cases, as the job selects and tests. Seed: initial weights, split, augmentation, batch
order. Reported: test Dice per region (mean and std over seeds), legacy and lesion-wise.

Centralised training runs a second time with as many optimiser steps per epoch as one site takes (3): what sets
the score at this scale is the number of sequential optimiser steps, not federation (bench/README.md).

    .venv/bin/python bench/segmentation_baseline.py OUT [--seeds 0 1 --rounds 3 --local-epochs 2] [--write-readme]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from readme_section import write_section
from torch.utils.data import ConcatDataset, DataLoader

from federation_tools.simulate import simulate
from fl_contract.labels import LABEL_MAPS, REGIONS
from fl_contract.models import build_model
from fl_contract.segmentation import DICE, LESION_DICE, MEAN, MODEL, SELECTION_METRIC, TEST, VAL, metric_key
from jobs.common import build_job, export
from jobs.segmentation.spec import CPU_DEMO, CPU_DEMO_DATA, KIND, SegmentationParams
from site_agent.data.demo.synthetic_brats import write_brats_site
from site_agent.segmentation.data import SiteData, load_site_data
from site_agent.segmentation.metrics import score_cases, site_summary
from site_agent.segmentation.training import train_epochs

SITES = ("site-1", "site-2", "site-3")
CPU = torch.device("cpu")
REPORTED = [(DICE, r) for r in (*REGIONS, MEAN)] + [(LESION_DICE, MEAN)]


@dataclass
class Run:
    """One training run's test scores (`test_dice_tc`, ..., pooled over the sites' test cases)."""

    test: dict[str, float]
    best_round: int
    seconds: float
    val_curve: list[float] = field(default_factory=list)


def demo_params(args: argparse.Namespace, seed: int, **changes: float) -> SegmentationParams:
    return SegmentationParams(**{**CPU_DEMO, "num_rounds": args.rounds, "local_epochs": args.local_epochs,
                                 "min_clients": len(SITES), "tracking": False, "seed": seed, **changes})


def federated(params: SegmentationParams, data_root: Path, out: Path) -> Run:
    """The job in FLARE's simulator; test scores are the sites' means weighted by their test cases."""
    start = time.perf_counter()
    job_dir = export(build_job(KIND, params), out / "job")
    run = simulate(job_dir, out / "ws", list(SITES), {params.dataset: str(data_root / "{site_name}" / "brats")},
                   timeout=900)
    if run.aborted():
        raise SystemExit(f"the simulator run failed; see {run.server_log}")
    results = json.loads((run.server_app_dir / "results.json").read_text())
    sites = results["test"]["sites"].values()
    weights = [m["test_cases"] for m in sites]
    test = {metric_key(TEST, m, r): sum(w * s[metric_key(TEST, m, r)] for w, s in zip(weights, sites)) / sum(weights)
            for m, r in REPORTED}
    curve = [r["selection"]["value"] for r in results["rounds"]] + [results["final_validation"]["selection"]["value"]]
    return Run(test, results["best_model"]["model_round"], time.perf_counter() - start, curve)


def _pooled_scores(
    net: torch.nn.Module, sites: Sequence[SiteData], split: str, params: SegmentationParams
) -> dict[str, float]:
    scores = [s for site in sites for s in score_cases(net, site.eval_loader(split), params.sliding_window(), CPU,
                                                       LABEL_MAPS[params.label_map])]
    return site_summary(scores, split)


def centralised(params: SegmentationParams, sites: Sequence[SiteData], steps_per_epoch: int | None = None) -> Run:
    """R x E epochs on the union of the sites' training cases, from the job's initial weights; `steps_per_epoch`
    caps the optimiser steps per epoch (a random subset of the pooled cases each epoch)."""
    start = time.perf_counter()
    torch.manual_seed(params.seed)  # the FedAvg controller's initial weights
    net = build_model(MODEL, **params.model_args())
    optimizer = torch.optim.Adam(net.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay)
    pooled: ConcatDataset[Any] = ConcatDataset([site.train for site in sites])
    best, best_round, curve = {k: v.clone() for k, v in net.state_dict().items()}, 0, []
    for model_round in range(params.num_rounds + 1):
        curve.append(_pooled_scores(net, sites, VAL, params)[SELECTION_METRIC])
        if curve[-1] > curve[best_round]:
            best, best_round = {k: v.clone() for k, v in net.state_dict().items()}, model_round
        if model_round == params.num_rounds:
            break
        seed = params.seed + 7919 * model_round  # as a site seeds its round
        for site in sites:
            site.train.transform.set_random_state(seed=seed)
        generator = torch.Generator().manual_seed(seed)
        sampler = None
        if steps_per_epoch is not None:
            sampler = torch.utils.data.RandomSampler(pooled, num_samples=steps_per_epoch * params.batch_size,
                                                     generator=generator)
        loader = DataLoader(pooled, batch_size=params.batch_size, shuffle=sampler is None, sampler=sampler,
                            generator=generator if sampler is None else None)
        train_epochs(net, loader, optimizer, CPU, params.local_epochs)
    net.load_state_dict(best)
    return Run(_pooled_scores(net, sites, TEST, params), best_round, time.perf_counter() - start, curve)


def mean_std(values: Sequence[float]) -> str:
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def table(runs: dict[str, list[Run]]) -> str:
    head = "| training | " + " | ".join(f"test {m.replace('_', ' ')} {r.lower()}" for m, r in REPORTED) + \
           " | best model round | seconds per run |"
    lines = [head.replace("dice", "Dice"), "| --- |" + " ---: |" * (len(REPORTED) + 2)]
    for name, seeds in runs.items():
        cells = [mean_std([run.test[metric_key(TEST, m, r)] for run in seeds]) for m, r in REPORTED]
        rounds = ", ".join(str(run.best_round) for run in seeds)
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {rounds} | {statistics.mean(r.seconds for r in seeds):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument("--write-readme", action="store_true", help="put the table in bench/README.md")
    args = parser.parse_args()
    data_root = args.out / "data"
    for index, site in enumerate(SITES, start=1):
        write_brats_site(data_root / site / "brats", index, **CPU_DEMO_DATA)
    epochs = args.rounds * args.local_epochs
    names = {"fedavg": f"FedAvg, {len(SITES)} sites, {args.rounds} rounds x {args.local_epochs} local epochs",
             "central": f"centralised, {epochs} epochs on the pooled cases",
             "steps": f"centralised, {epochs} epochs of as many steps as one site's epoch"}
    runs: dict[str, list[Run]] = {name: [] for name in names.values()}
    start = time.perf_counter()
    for seed in args.seeds:
        params = demo_params(args, seed)
        runs[names["fedavg"]].append(federated(params, data_root, args.out / f"fedavg-{seed}"))
        sites = [load_site_data(data_root / site / "brats", params.case_recipe()) for site in SITES]
        runs[names["central"]].append(centralised(params, sites))
        runs[names["steps"]].append(centralised(params, sites, steps_per_epoch=len(sites[0].split.train)))
        print(table(runs), flush=True)
    curves = {name: [[round(v, 3) for v in run.val_curve] for run in seeds] for name, seeds in runs.items()}
    (args.out / "baseline.json").write_text(
        json.dumps({name: [vars(run) for run in seeds] for name, seeds in runs.items()}, indent=1)
    )
    text = (f"Seeds {', '.join(map(str, args.seeds))}; 3 synthetic sites of 5 cases (3 training, 1 validation, 1 test "
            f"each; 9 / 3 / 3 pooled); CPU_DEMO SegResNet; mean ± std over seeds; whole run "
            f"{(time.perf_counter() - start) / 60:.1f} min.\n\n{table(runs)}\n\nValidation Dice (pooled, BraTS "
            f"convention) of the model after each round (every {args.local_epochs} epochs), per seed:\n\n" +
            "\n".join(f"- {name}: {curve}" for name, curve in curves.items()))
    print(text)
    if args.write_readme:
        write_section("segmentation_baseline", text)


if __name__ == "__main__":
    main()
