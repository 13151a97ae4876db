"""FedKT-CSD one-shot job: sites send secure-aggregated DC-AE latent statistics, the server releases DP synthetic data.

Sites need an ISIC-format folder and the autoencoder folder under their dataset keys; the server needs the same
autoencoder folder in its local/server_app.json. `site-agent fedkt train-demo-autoencoder` makes one for demos.
See docs/fedkt-csd.md and docs/fedkt-csd-privacy.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.classes import PLAYERFL_CLASSES, TRAINING_CLASSES
from fl_contract.fedkt import ADJACENCIES, COUNT_NOISE_MULTIPLIER, METHODS, MIN_SITES
from jobs.spec import Apps, FederationParams, JobKind, param


@dataclass(frozen=True)
class FedKTCSDParams(FederationParams):
    classes: tuple[str, ...] = param(PLAYERFL_CLASSES, "class subset (comma separated on the command line)",
                                     choices=TRAINING_CLASSES)
    dataset: str = param("isic", "dataset key of the sites' ISIC-format folder in their site_agent.json")
    autoencoder: str = param("dcae", "key of the autoencoder folder, in the sites' site_agent.json and the server's "
                                     "local/server_app.json; the same weights and clip_norm.json everywhere")
    image_size: int = param(64, "images are resized to this square size (64 gives d = 128 with f32c32)", low=8)
    epsilon: float = param(10.0, "epsilon of the release's (epsilon, delta)-DP guarantee", low=0.01)
    delta: float = param(1e-5, "delta of the release's guarantee", low=1e-12, high=0.1)
    adjacency: str = param("add_remove", "add_remove (counts noised) or replace_one (counts public)",
                           choices=ADJACENCIES)
    method: str = param("analytic", "noise calibration: analytic, pld or split", choices=METHODS)
    count_noise_multiplier: float = param(COUNT_NOISE_MULTIPLIER, "noise multiplier of the counts under add_remove "
                                          "(noise std in records); the sums share the rest of the budget (analytic "
                                          "and pld; split gives every query one multiplier)", low=0.1)
    samples_per_class: int = param(0, "synthetic images per released class; 0 = the class's pooled noisy count over "
                                      "all sites", low=0)
    min_clients: int = param(MIN_SITES, "sites that must take part (secure aggregation needs at least 3)",
                             low=MIN_SITES)
    min_count: float = param(10.0, "classes whose noisy count is below this are withheld (10: an empty class "
                                   "passes with 2% probability at count noise std 5)", low=1.0)
    holdout_fraction: float = param(0.2, "share of each site's images held out for the evaluation round (never in "
                                         "the statistics)", low=0.0, high=0.9)
    reviewed_statistics: str = param("", "dataset key of the folder with the privacy officer's reviewed export "
                                         "(sent instead of recomputing); empty = compute")
    evaluate: bool = param(False, "train a classifier on the synthetic set and score it at each site on held-out images")
    classifier_epochs: int = param(10, "passes of that classifier over the synthetic set, at least", low=1)
    classifier_min_steps: int = param(400, "optimiser steps (batches of 32) of that classifier, at least: a small "
                                           "synthetic set gets more passes", low=0)
    noise_seed: int | None = param(None, "fixed DP noise seed, for tests and audits on non-sensitive data only: "
                                         "anyone who knows it can remove the noise (default: secret)")
    seed: int = param(0, "split, sampling and classifier seed")


def _apps(p: FedKTCSDParams) -> Apps:
    shared = {"classes": list(p.classes), "autoencoder": p.autoencoder, "image_size": p.image_size, "seed": p.seed}
    return Apps(
        controller={**shared, "epsilon": p.epsilon, "delta": p.delta, "adjacency": p.adjacency, "method": p.method,
                    "count_noise_multiplier": p.count_noise_multiplier, "samples_per_class": p.samples_per_class,
                    "min_clients": p.min_clients, "min_count": p.min_count, "noise_seed": p.noise_seed,
                    "evaluate": p.evaluate, "classifier_epochs": p.classifier_epochs,
                    "classifier_min_steps": p.classifier_min_steps},
        site_task={**shared, "dataset": p.dataset, "holdout_fraction": p.holdout_fraction,
                   "reviewed_statistics": p.reviewed_statistics or None},
    )


KIND = JobKind(
    name="fedkt-csd",
    summary="FedKT-CSD one-shot synthetic data: sites send secure-aggregated (masked) DC-AE latent statistics, the "
            "server releases DP class Gaussians and a synthetic image set",
    params=FedKTCSDParams,
    controller="server_app.fedkt_csd.FedKTCSDController",
    site_task="site_agent.tasks.fedkt_csd.FedKTCSDTask",
    apps=_apps,
    dataset_keys=("dataset", "autoencoder", "reviewed_statistics"),
    server_model_keys=("autoencoder",),
    resumable=False,  # one-shot: its key exchange and masks cannot outlive the run
    demo="jobs.fedkt_csd.demo:DEMOS",
    guide="docs/fedkt-csd.md",
)
