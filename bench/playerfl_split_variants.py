"""PLayer-FL's sensitivity curve under the variants the paper leaves open: which epoch, which batch, which norm.

    nice -n 19 .venv/bin/python bench/playerfl_split_variants.py OUT [--seeds 0 1 2 3 4 --write-readme]

The same three federations as `playerfl_split_claim.py` (appearance, labels, both; same pool, deal and looks) and
the same seeds and job settings. Per site, as its round 1 does (`LocalTrainer`, `federation_sensitivity`, the job's
initial weights and loss): the curve at the initial weights (epoch 0) and after the first local epoch (epoch 1, the
job's timing), each on one fresh training batch (the job's batch size, the job's choice) and on the whole training
split as one batch. The federation's curve under both normalisations, p at t = 1.5, and the conv layers' share of
the total, F_5 / F_L (total normalisation), which the paper's reasoning says should be larger where sites differ
in appearance. Only site-side code is run; no FLARE and no aggregation (the curve is measured before any).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from playerfl_split_claim import KINDS, NARROW_CNN5, SITES, write_federation, write_pool
from readme_section import write_section
from torch import nn

from fl_contract.models import build_model
from fl_contract.playerfl.layers import model_layers
from server_app.playerfl_split import NORMALISATIONS, choose_split, combine_curves, normalise_curve
from site_agent.playerfl.data import IsicImages, class_weights, load_site_splits
from site_agent.playerfl.sensitivity import federation_sensitivity
from site_agent.playerfl.training import LocalTrainer, focal_loss

VARIANTS = ("epoch 1, one batch", "epoch 1, whole split", "epoch 0, one batch", "epoch 0, whole split")
CONV_LAYERS = len(NARROW_CNN5["channels"])


def site_curves(folder: Path, seed: int, args: argparse.Namespace) -> tuple[dict[str, list[float]], int]:
    """One site's curve under every variant, and its training-set size."""
    splits = load_site_splits(folder, seed)
    data = IsicImages(splits.train, args.size, augment=True)
    loss = focal_loss(1.0, class_weights(splits.train))

    def new_model() -> nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(seed)  # the job's initial weights, the same at every site
            return build_model("cnn5", num_classes=4, **NARROW_CNN5)

    torch.manual_seed(seed)  # as FLARE's executor does before the task
    net = new_model()
    trainers = {which: LocalTrainer(data, model_layers(net), new_model, loss, args.local_epochs, size,
                                    args.learning_rate, 1e-4, seed, 0, {})
                for which, size in (("one batch", args.batch_size), ("whole split", len(data)))}
    curves = {}
    with torch.random.fork_rng():  # dropout in these passes must not move the job's random stream
        for which, trainer in trainers.items():
            curves[f"epoch 0, {which}"] = federation_sensitivity(new_model(), loss, *trainer.fresh_batch()).cumulative
    trainers["one batch"].train(net, epochs=1)
    for which, trainer in trainers.items():  # the job's own curve first, as its round 1 measures it
        curves[f"epoch 1, {which}"] = federation_sensitivity(net, loss, *trainer.fresh_batch()).cumulative
    return curves, len(splits.train)


def measure(out: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    pool = write_pool(out / "pool", SITES * args.images, args.size, args.data_seed)
    rows = []
    for kind in KINDS:
        sites = write_federation(out, out / "pool", pool, kind, args.data_seed)
        for seed in args.seeds:
            per_site = {name: site_curves(folder, seed, args) for name, folder in sites.items()}
            samples = {name: n for name, (_, n) in per_site.items()}
            for variant in VARIANTS:
                raw = {name: curves[variant] for name, (curves, _) in per_site.items()}
                federation = {norm: combine_curves({s: normalise_curve(c, norm) for s, c in raw.items()}, samples)
                              for norm in NORMALISATIONS}
                rows.append({"kind": kind, "seed": seed, "variant": variant,
                             "p": {norm: choose_split(f, 1.5) for norm, f in federation.items()},
                             "site_p": [choose_split(normalise_curve(c, "total"), 1.5) for c in raw.values()],
                             "conv_share": float(federation["total"][CONV_LAYERS - 1])})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | federation | p (total) per seed | p (first_layer) per seed | sites' own p | "
             "F_5 / F_L per seed | median F_5 / F_L |", "|---|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        for kind in KINDS:
            mine = [r for r in rows if r["variant"] == variant and r["kind"] == kind]
            shares = [r["conv_share"] for r in mine]
            lines.append(f"| {variant} | {kind} | {[r['p']['total'] for r in mine]} | "
                         f"{[r['p']['first_layer'] for r in mine]} | "
                         f"{' '.join(''.join(map(str, r['site_p'])) for r in mine)} | "
                         f"{[round(s, 2) for s in shares]} | {np.median(shares):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--local-epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-3)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = (f"Seeds {args.seeds}; the claim benchmark's federations and settings ({args.images} images per site at "
            f"{args.size} px, batch {args.batch_size}, Adam {args.learning_rate:g}); t = 1.5. Sites' own p: one "
            "digit per site (site-1..4), one group per seed.\n\n" + table(measure(args.out, args)))
    print(text)
    if args.write_readme:
        write_section("playerfl_split_variants", text)


if __name__ == "__main__":
    main()
