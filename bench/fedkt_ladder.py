"""FedKT-CSD utility ladder: what each step from real images to the job's DP release costs the downstream classifier.

    .venv/bin/python bench/fedkt_ladder.py --autoencoder DEMO_AE [--images-per-site 400 --seeds 0,1 --write-readme]

Data: 3 demo ISIC sites (`write_isic_site`, Dirichlet `alpha` label skew), the job's 4 default classes; each site
holds out 20% with the job's split. Every classifier is the evaluation round's narrow CNN5, scored on the pooled
held-out real images (balanced accuracy). Everything runs in-process with the job's plain functions: the sites'
statistics path (`site_agent.fedkt_csd`), their sum as secure aggregation would deliver it, and the server's release
(`server_app.fedkt_release`); no FLARE. Rungs:

1. real: trained on the pooled real images of the sites' statistics parts (centralised, the ceiling);
2. reconstructions: trained on those images' autoencoder reconstructions (what the autoencoder alone costs);
3. no noise: FedKT-CSD released with noise multiplier 0, one synthetic image per (pooled) record, decoded;
4. epsilon 10: the job's DP release (epsilon 10, delta 1e-5, add/remove, analytic calibration, count multiplier
   5), sampled at the pooled noisy counts;
5. job defaults: rung 4's release (same noise) as the evaluation round trains on it: images through uint8,
   `classifier_epochs` and `classifier_min_steps` at their job defaults;
and FedAvg of the same classifier: one local epoch per round, the server's sample-weighted mean, as many rounds as
rungs 1-4 have passes (`--passes`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from readme_section import write_section

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd.classifier import build_classifier, evaluate_classifier, train_classifier, training_budget
from fl_contract.fedkt_csd.wire import ClassStatistics, from_ring
from fl_contract.models import load_numpy_params, state_dict_to_numpy
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder
from jobs.fedkt_csd.spec import FedKTCSDParams
from server_app.aggregation.updates import SiteUpdate
from server_app.aggregation.weighted_mean import weighted_mean
from server_app.fedkt_outputs import to_uint8
from server_app.fedkt_release import (
    ClassGaussians,
    class_gaussians,
    decode_latents,
    release_class_gaussians,
    sample_latents,
    synthetic_counts,
)
from server_app.privacy.dp_calibration import calibrate_noise
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.demo_autoencoder import read_quality, reconstruct
from site_agent.fedkt_csd.site_data import LabelledImages, load_split, read_images, statistics_vector

SITES, SIZE = 3, 64
CLASSES = list(PLAYERFL_CLASSES)
JOB = FedKTCSDParams()
RUNGS = ("real", "reconstructions", "no noise", "epsilon 10", "job defaults", "FedAvg")


def sites(root: Path, n_images: int, alpha: float, seed: int) -> list[Path]:
    return [write_isic_site(root / f"site-{i}", i, SITES, n_images, CLASSES, alpha=alpha, seed=seed)
            for i in range(1, SITES + 1)]


def site_parts(folders: list[Path], seed: int) -> list[tuple[LabelledImages, LabelledImages]]:
    """(statistics part, held-out part) of each site, with the job's split."""
    parts = []
    for folder in folders:
        split = load_split(folder, CLASSES, JOB.holdout_fraction, seed)
        parts.append((read_images(split.statistics, SIZE), read_images(split.holdout, SIZE)))
    return parts


def pooled_statistics(ae: LoadedAutoencoder, folders: list[Path], seed: int) -> ClassStatistics:
    """The sites' statistics vectors summed as secure aggregation delivers them (mod 2^64), decoded by the server."""
    total = sum(statistics_vector(ae, f, CLASSES, SIZE, JOB.holdout_fraction, seed) for f in folders)
    return from_ring(np.asarray(total, dtype=np.uint64), len(CLASSES), ae.clip_norm)


def release(ae: LoadedAutoencoder, stats: ClassStatistics, noise: bool, seed: int) -> ClassGaussians:
    """The server's release at the job's defaults; without noise, the same estimates (bias correction, PSD
    projection) straight from the exact statistics."""
    if not noise:
        return class_gaussians(stats, 0.0, min_count=JOB.min_count)
    calibration = calibrate_noise(JOB.epsilon, JOB.delta, ae.clip_norm, JOB.adjacency, JOB.method,
                                  JOB.count_noise_multiplier)
    return release_class_gaussians(stats, calibration, noise_seed=seed, min_count=JOB.min_count,
                                   covariance="per_class").gaussians  # the paper's, as its table measured


def synthetic_set(ae: LoadedAutoencoder, gaussians: ClassGaussians, seed: int) -> LabelledImages:
    counts = synthetic_counts(gaussians.counts, JOB.samples_per_class)
    latents, labels = sample_latents(gaussians, counts, seed)
    return LabelledImages(decode_latents(ae.model, latents, SIZE), torch.from_numpy(labels))


def fedavg(parts: list[tuple[LabelledImages, LabelledImages]], rounds: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    global_model = build_classifier(SIZE, len(CLASSES))
    for round_index in range(rounds):
        updates = []
        for index, (train, _) in enumerate(parts):
            local = build_classifier(SIZE, len(CLASSES))
            local.load_state_dict(global_model.state_dict())
            trained = train_classifier(train.images, train.labels, len(CLASSES), 1, seed + round_index, model=local)
            updates.append(SiteUpdate(f"site-{index + 1}", state_dict_to_numpy(trained), len(train.labels)))
        load_numpy_params(global_model, weighted_mean(updates))
    return global_model.eval()


def ladder(ae: LoadedAutoencoder, root: Path, n_images: int, alpha: float, passes: int, seed: int) -> dict[str, float]:
    """Balanced accuracy of every rung on the pooled held-out real images, for one seed."""
    folders = sites(root, n_images, alpha, seed)
    parts = site_parts(folders, seed)
    train = LabelledImages(torch.cat([t.images for t, _ in parts]), torch.cat([t.labels for t, _ in parts]))
    test = LabelledImages(torch.cat([h.images for _, h in parts]), torch.cat([h.labels for _, h in parts]))
    stats = pooled_statistics(ae, folders, seed)
    noisy = synthetic_set(ae, release(ae, stats, True, seed), seed)
    as_trained = LabelledImages(torch.from_numpy(to_uint8(noisy.images)).float() / 255.0, noisy.labels)
    sets = {"real": train, "reconstructions": LabelledImages(reconstruct(ae.model, train.images), train.labels),
            "no noise": synthetic_set(ae, release(ae, stats, False, seed), seed), "epsilon 10": noisy}
    models = {name: train_classifier(s.images, s.labels, len(CLASSES), passes, seed) for name, s in sets.items()}
    models["job defaults"] = train_classifier(as_trained.images, as_trained.labels, len(CLASSES),
                                              JOB.classifier_epochs, seed, min_steps=JOB.classifier_min_steps)
    models["FedAvg"] = fedavg(parts, passes, seed)
    scores = {name: evaluate_classifier(m, test.images, test.labels)["balanced_accuracy"] for name, m in models.items()}
    sizes = {name: len(s.labels) for name, s in sets.items()}
    print(f"seed {seed}: {scores}; training images {sizes}; held out {len(test.labels)}", flush=True)
    return {**scores, "train": len(train.labels), "synthetic": len(noisy.labels), "test": len(test.labels)}


def table(runs: list[dict[str, float]], seeds: list[int], args: argparse.Namespace, ae_folder: Path,
          seconds: float) -> str:
    quality = read_quality(ae_folder)
    budget = training_budget(int(runs[0]["synthetic"]), JOB.classifier_epochs, JOB.classifier_min_steps, 32)
    split = ", ".join(f"{int(r['train'])} / {int(r['test'])}" for r in runs)
    lines = [f"{SITES} sites x {args.images_per_site} images, alpha {args.alpha}, classes {', '.join(CLASSES)}; "
             f"training / held-out images per seed: {split}; rungs 1-4 {args.passes} passes, FedAvg {args.passes} "
             f"rounds of one local epoch; job defaults {budget.epochs} passes ({budget.steps} steps) over "
             f"{int(runs[0]['synthetic'])} synthetic images (seed {seeds[0]}). Autoencoder: `{ae_folder.name}`"
             + ("" if quality is None else f", {quality['psnr_db']:.1f} dB PSNR on held-out public images")
             + f". {seconds / 60:.1f} min.",
             "",
             "| rung | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |",
             "| --- | " + " | ".join("---:" for _ in seeds) + " | ---: |"]
    for rung in RUNGS:
        values = [r[rung] for r in runs]
        lines.append(f"| {rung} | " + " | ".join(f"{v:.3f}" for v in values) + f" | {np.mean(values):.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autoencoder", type=Path, required=True, help="e.g. the demo autoencoder folder")
    parser.add_argument("--images-per-site", type=int, default=400)
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet label skew (the demo's)")
    parser.add_argument("--passes", type=int, default=30, help="passes of rungs 1-4, rounds of FedAvg")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    ae = load_autoencoder(args.autoencoder)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [ladder(ae, Path(tmp) / f"seed-{seed}", args.images_per_site, args.alpha, args.passes, seed)
                for seed in seeds]
    text = table(runs, seeds, args, args.autoencoder, time.monotonic() - started)
    print(text)
    if args.write_readme:
        write_section("fedkt_ladder", text)


if __name__ == "__main__":
    main()
