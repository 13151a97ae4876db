"""FedKT-CSD quality: membership inference on the release, and downstream accuracy vs FedAvg under label skew.

    .venv/bin/python bench/fedkt_quality.py --autoencoder FOLDER [--images-per-site 96 --rounds 10 --seeds 0]

Data: the demo ISIC-format generator, 3 sites, 4 classes, Dirichlet alpha label skew; each site holds out 20%
(the job's split). Everything runs in-process with the job's plain functions (no FLARE).

1. Membership inference at epsilon 10 (and with no noise, to show the attacks have power): members are the
   records in the statistics, non-members the sites' held-out records (same sites, same distribution). Two attacks:
   (a) log-density of the record's latent under its class's released Gaussian (white box on the published DP
   statistics);
   (b) minus the distance to the nearest synthetic latent of its class. AUC 0.5 = no better than guessing.
2. Downstream balanced accuracy on the pooled held-out real images, for alpha 0.1, 0.5, 10: FedKT-CSD (classifier
   trained on the decoded synthetic set, `samples` per class) vs FedAvg (same classifier, `rounds` rounds of one
   local epoch, sample-weighted) vs centralised training on the pooled real training images.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.fedkt_csd.classifier import build_classifier, evaluate_classifier, train_classifier
from fl_contract.fedkt_csd.wire import from_ring
from fl_contract.models import load_numpy_params, state_dict_to_numpy
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder, to_autoencoder_range
from jobs.fedkt_csd.spec import FedKTCSDParams
from server_app.fedkt_release import decode_latents, release_class_gaussians, sample_latents
from server_app.privacy.dp_calibration import calibrate_noise
from site_agent.data.demo.synthetic_isic import write_isic_site
from site_agent.fedkt_csd.site_data import LabelledImages, load_split, read_images, statistics_vector
from site_agent.fedkt_csd.stats import clip_latents, encode_latents

SITES, SIZE = 3, 64
CLASSES = list(PLAYERFL_CLASSES)


def make_sites(root: Path, alpha: float, n_images: int, seed: int) -> list[Path]:
    return [write_isic_site(root / f"site-{i}", i, SITES, n_images, alpha=alpha, seed=seed)
            for i in range(1, SITES + 1)]


def site_parts(folders: list[Path], seed: int) -> list[tuple[LabelledImages, LabelledImages]]:
    parts = []
    for folder in folders:
        split = load_split(folder, CLASSES, 0.2, seed)
        parts.append((read_images(split.statistics, SIZE), read_images(split.holdout, SIZE)))
    return parts


def fedkt_release(ae: LoadedAutoencoder, folders: list[Path], epsilon: float | None, seed: int):
    """The job's release from the sites' summed vectors; epsilon None releases without noise (attack baseline)."""
    total = sum(statistics_vector(ae, f, CLASSES, SIZE, 0.2, seed) for f in folders)  # uint64 sum = unmasked sum
    stats = from_ring(np.asarray(total, dtype=np.uint64), len(CLASSES), ae.clip_norm)
    calibration = calibrate_noise(epsilon or 10.0, 1e-5, ae.clip_norm)
    if epsilon is None:
        calibration = replace(calibration, epsilon=math.inf, noise_multiplier=0.0, count_multiplier=None,
                              accounted_epsilon=math.inf)
    return release_class_gaussians(stats, calibration, noise_seed=seed, min_count=FedKTCSDParams().min_count,
                                   covariance="per_class")  # the paper's, as its table measured


def membership_auc(ae: LoadedAutoencoder, folders: list[Path], epsilon: float | None, seed: int) -> tuple[float, float]:
    """Members: the records in the statistics; non-members: the sites' held-out records (same distribution)."""
    parts = site_parts(folders, seed)
    member = LabelledImages(torch.cat([t.images for t, _ in parts]), torch.cat([t.labels for t, _ in parts]))
    outsiders = LabelledImages(torch.cat([h.images for _, h in parts]), torch.cat([h.labels for _, h in parts]))
    release = fedkt_release(ae, folders, epsilon, seed)
    g = release.gaussians
    synthetic, synthetic_labels = sample_latents(g, [200] * len(g.classes), seed)
    scores = {"density": [], "distance": []}
    for data in (member, outsiders):
        z = clip_latents(encode_latents(ae.model, to_autoencoder_range(data.images)), ae.clip_norm).numpy()
        density, distance = [], []
        for latent, label in zip(z, data.labels.numpy()):
            k = int(np.flatnonzero(g.classes == label)[0])
            diff = latent - g.means[k]
            density.append(-diff @ np.linalg.solve(g.covariances[k], diff))
            distance.append(-np.min(np.linalg.norm(synthetic[synthetic_labels == label] - latent, axis=1)))
        scores["density"].append(density)
        scores["distance"].append(distance)
    truth = [1] * len(member.labels) + [0] * len(outsiders.labels)
    return tuple(float(roc_auc_score(truth, s[0] + s[1])) for s in (scores["density"], scores["distance"]))


def fedavg(parts: list[tuple[LabelledImages, LabelledImages]], rounds: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    global_model = build_classifier(SIZE, len(CLASSES))
    sizes = np.array([len(train.labels) for train, _ in parts], dtype=np.float64)
    for round_index in range(rounds):
        updates = []
        for train, _ in parts:
            local = build_classifier(SIZE, len(CLASSES))
            local.load_state_dict(global_model.state_dict())
            updates.append(state_dict_to_numpy(train_classifier(train.images, train.labels, len(CLASSES), 1,
                                                                seed + round_index, model=local)))
        load_numpy_params(global_model,
                          {k: sum(w * u[k] for w, u in zip(sizes / sizes.sum(), updates)) for k in updates[0]})
    return global_model.eval()


def downstream(ae: LoadedAutoencoder, folders: list[Path], rounds: int, samples: int, seed: int) -> dict[str, float]:
    parts = site_parts(folders, seed)
    test = LabelledImages(torch.cat([h.images for _, h in parts]), torch.cat([h.labels for _, h in parts]))
    release = fedkt_release(ae, folders, 10.0, seed)
    latents, labels = sample_latents(release.gaussians, [samples] * len(release.gaussians.classes), seed)
    synthetic = decode_latents(ae.model, latents, SIZE)
    epochs = max(1, round(rounds * sum(len(t.labels) for t, _ in parts) / len(labels)))  # same number of steps
    fedkt_model = train_classifier(synthetic, torch.from_numpy(labels), len(CLASSES), epochs, seed)
    pooled = LabelledImages(torch.cat([t.images for t, _ in parts]), torch.cat([t.labels for t, _ in parts]))
    central = train_classifier(pooled.images, pooled.labels, len(CLASSES), rounds, seed)
    return {name: evaluate_classifier(model, test.images, test.labels)["balanced_accuracy"]
            for name, model in (("fedkt_csd", fedkt_model), ("fedavg", fedavg(parts, rounds, seed)),
                                ("central", central))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autoencoder", type=Path, required=True, help="e.g. the demo autoencoder folder")
    parser.add_argument("--images-per-site", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--samples", type=int, default=100, help="synthetic images per class")
    parser.add_argument("--seeds", default="0")
    args = parser.parse_args()
    ae = load_autoencoder(args.autoencoder)
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = make_sites(root / "mia", 10.0, args.images_per_site, seeds[0])
        print("| epsilon | density attack AUC | nearest-synthetic attack AUC |\n|---|---|---|")
        for epsilon in (10.0, None):
            density, distance = membership_auc(ae, folders, epsilon, seeds[0])
            print(f"| {epsilon or 'no noise'} | {density:.3f} | {distance:.3f} |")
        print(f"\n| alpha | FedKT-CSD (eps 10) | FedAvg ({args.rounds} rounds) | centralised | seeds |"
              "\n|---|---|---|---|---|")
        for alpha in (0.1, 0.5, 10.0):
            runs = [downstream(ae, make_sites(root / f"a{alpha}-s{seed}", alpha, args.images_per_site, seed),
                               args.rounds, args.samples, seed) for seed in seeds]
            mean = {k: np.mean([r[k] for r in runs]) for k in runs[0]}
            print(f"| {alpha} | {mean['fedkt_csd']:.3f} | {mean['fedavg']:.3f} | {mean['central']:.3f} "
                  f"| {len(seeds)} |")


if __name__ == "__main__":
    main()
