"""FedKT-CSD one-shot job: sites send secure-aggregated DC-AE latent statistics, the server releases DP synthetic data.

Parameters (docs/fedkt-csd.md):
    classes              class subset, comma separated in the CLI (default BCC,BKL,MEL,NV)
    dataset              dataset key of the sites' ISIC-format folder in their site_agent.json (default "isic")
    autoencoder          key of the autoencoder folder: in the sites' site_agent.json "datasets" and in the server's
                         local/server_app.json "models" (default "dcae"); the same weights and clip_norm.json everywhere
    image_size           images are resized to this square size (64 for d = 128 with the f32c32 autoencoders)
    epsilon, delta       the (epsilon, delta)-DP guarantee of the release (default 10, 1e-5)
    adjacency            add_remove (counts noised) or replace_one (counts public)
    method               noise calibration: analytic, pld or split
    samples_per_class    synthetic images per released class; 0 = the noisy real count per site
    min_clients          sites that must take part (at least 3)
    min_count            classes whose noisy count is below this are withheld
    holdout_fraction     share of each site's images held out for the evaluation round (never in the statistics)
    reviewed_statistics  dataset key of the folder with the privacy officer's reviewed export (sent instead of
                         recomputing); empty = compute
    evaluate             train a classifier on the synthetic set and score it at each site on held-out images
    classifier_epochs    epochs of that classifier
    noise_seed           fixed DP noise seed, for tests and audits on non-sensitive data only (default: secret)
    seed                 split, sampling and classifier seed

Sites need an ISIC-format folder under "isic" and the autoencoder folder under "dcae"; the server needs the same
autoencoder folder in local/server_app.json. `site-agent fedkt train-demo-autoencoder` makes one for demos.
"""

from __future__ import annotations

import argparse

from nvflare.job_config.api import FedJob

from jobs.common import new_job
from server_app.fedkt_csd import MIN_SITES, FedKTCSDController
from fl_contract.classes import PLAYERFL_CLASSES
from site_agent.tasks.fedkt_csd import FedKTCSDTask

NAME = "fedkt-csd"


def build_job(classes: str = ",".join(PLAYERFL_CLASSES), dataset: str = "isic", autoencoder: str = "dcae",
              image_size: int = 64, epsilon: float = 10.0, delta: float = 1e-5, adjacency: str = "add_remove",
              method: str = "analytic", samples_per_class: int = 0, min_clients: int = MIN_SITES,
              min_count: float = 2.0, holdout_fraction: float = 0.2, reviewed_statistics: str = "",
              evaluate: bool = False, classifier_epochs: int = 10, noise_seed: int | None = None,
              seed: int = 0) -> FedJob:
    class_list = [c.strip() for c in classes.split(",") if c.strip()]
    job = new_job(NAME, min_clients)
    job.to_server(FedKTCSDController(
        classes=class_list, autoencoder=autoencoder, image_size=image_size, epsilon=epsilon, delta=delta,
        adjacency=adjacency, method=method, samples_per_class=samples_per_class, min_clients=min_clients,
        min_count=min_count, noise_seed=noise_seed, evaluate=evaluate, classifier_epochs=classifier_epochs, seed=seed))
    job.to_clients(FedKTCSDTask(
        classes=class_list, dataset=dataset, autoencoder=autoencoder, image_size=image_size,
        holdout_fraction=holdout_fraction, reviewed_statistics=reviewed_statistics or None, seed=seed))
    return job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--classes", default=",".join(PLAYERFL_CLASSES))
    parser.add_argument("--dataset", default="isic")
    parser.add_argument("--autoencoder", default="dcae")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--adjacency", default="add_remove", choices=["add_remove", "replace_one"])
    parser.add_argument("--method", default="analytic", choices=["analytic", "pld", "split"])
    parser.add_argument("--samples-per-class", type=int, default=0)
    parser.add_argument("--min-clients", type=int, default=MIN_SITES)
    parser.add_argument("--min-count", type=float, default=2.0)
    parser.add_argument("--holdout-fraction", type=float, default=0.2)
    parser.add_argument("--reviewed-statistics", default="", help="dataset key of the reviewed export folder")
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--classifier-epochs", type=int, default=10)
    parser.add_argument("--noise-seed", type=int, help="tests and audits only: anyone who knows it can remove the noise")
    parser.add_argument("--seed", type=int, default=0)
