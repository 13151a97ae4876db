"""fedkt-csd's parameters: one-shot DP synthetic data from secure-aggregated DC-AE latent statistics
(docs/fedkt-csd.md, docs/fedkt-csd-privacy.md)."""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.classes import PLAYERFL_CLASSES, TRAINING_CLASSES
from fl_contract.fedkt_csd import ADJACENCIES, COUNT_NOISE_MULTIPLIER, COVARIANCE_ESTIMATES, METHODS
from fl_contract.params import FederationParams, param
from fl_contract.ring import MIN_MASKED_SITES


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
    covariance: str = param("per_class", "class covariances of the release: per_class (the paper's), shrunk (toward "
                                         "the released classes' pooled covariance, by a weight the noise sets) or "
                                         "pooled (one for all classes); post-processing, no privacy cost",
                            choices=COVARIANCE_ESTIMATES)
    samples_per_class: int = param(0, "synthetic images per released class; 0 = the class's pooled noisy count over "
                                      "all sites", low=0)
    min_clients: int = param(MIN_MASKED_SITES, "sites that must take part (secure aggregation needs at least 3)",
                             low=MIN_MASKED_SITES)
    min_count: float = param(10.0, "classes whose noisy count is below this are withheld (10: an empty class "
                                   "passes with 2% probability at count noise std 5)", low=1.0)
    holdout_fraction: float = param(0.2, "share of each site's images held out for the evaluation round (never in "
                                         "the statistics)", low=0.0, high=0.9)
    reviewed_statistics: str = param("", "dataset key of the folder with the privacy officer's reviewed export "
                                         "(sent instead of recomputing); empty = compute")
    evaluate: bool = param(False, "train a classifier on the synthetic set and score it, and the released class "
                                  "Gaussians as a classifier, at each site on held-out images")
    classifier_epochs: int = param(10, "passes of that classifier over the synthetic set, at least", low=1)
    classifier_min_steps: int = param(400, "optimiser steps (batches of 32) of that classifier, at least: a small "
                                           "synthetic set gets more passes", low=0)
    classifier_noise: float = param(0.03, "std of the Gaussian noise added to each training batch of that classifier "
                                          "(pixels in [0, 1]): decoded images lack the sensor noise of real ones "
                                          "(docs/fedkt-csd.md#the-downstream-classifier)", low=0.0, high=0.5)
    classifier_members: int = param(3, "classifiers trained on the synthetic set, with seeds seed, seed + 1, ...; "
                                       "their mean class probabilities classify (one classifier's score moved by up "
                                       "to 0.44 with its seed alone; docs/fedkt-csd.md#the-downstream-classifier)",
                                    low=1, high=16)
    noise_seed: int | None = param(None, "fixed DP noise seed, for tests and audits on non-sensitive data only: "
                                         "anyone who knows it can remove the noise (default: secret)")
    seed: int = param(0, "split, sampling and classifier seed")
