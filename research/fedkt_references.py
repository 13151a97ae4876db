"""What FedKT-CSD's synthetic-set classifier is read against, on the same sites and the same held-out images.

Two references, both the evaluation round's classifier ensemble (`fl_contract.fedkt_csd.classifier`) with the job's
split (`load_split`: the same held-out images the sites score the synthetic-set classifier on):

- **pooled real**: trained on every site's real statistics-part images at once, with the job's classifier recipe
  (`classifier_epochs`, `classifier_min_steps`, `classifier_noise`, `classifier_members`): the ceiling, what
  centralising the data would give;
- **FedAvg**: the same classifier federated, one local epoch per round and the server's sample-weighted mean
  (`server_app.aggregation.weighted_mean`), for as many rounds as the pooled classifier has passes, so that each
  image is seen as often; one FedAvg run per ensemble member, with the member's seed.

They need every site's images in one process, which only a benchmark on one machine has: a federation never computes
them. `bench/fedkt_demo.py` prints them beside the demo's FedKT-CSD scores; `fl-demo`, installed without this
package, prints its own scores and points there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from fl_contract.fedkt_csd.classifier import (
    Ensemble,
    build_classifier,
    evaluate_classifier,
    job_training_budget,
    member_seeds,
    train_classifier,
    train_job_ensemble,
)
from fl_contract.job_params.fedkt_csd import FedKTCSDParams
from fl_contract.models import load_numpy_params, state_dict_to_numpy
from server_app.aggregation.updates import SiteUpdate
from server_app.aggregation.weighted_mean import weighted_mean
from site_agent.fedkt_csd.site_data import LabelledImages, load_split, read_images


@dataclass(frozen=True)
class SiteImages:
    """One site's images as the job splits them: `train` the statistics part, `held_out` what it scores on."""

    site: str
    train: LabelledImages
    held_out: LabelledImages


def read_sites(folders: Mapping[str, Path], job: FedKTCSDParams) -> list[SiteImages]:
    """Each site's ISIC folder split and read exactly as the job's site task does."""
    sites = []
    for site, folder in sorted(folders.items()):
        split = load_split(Path(folder), job.classes, job.holdout_fraction, job.seed)
        sites.append(SiteImages(site, read_images(split.statistics, job.image_size),
                                read_images(split.holdout, job.image_size)))
    return sites


def pooled_passes(sites: list[SiteImages], job: FedKTCSDParams) -> int:
    """Passes of the job's classifier budget over the pooled real training images."""
    return job_training_budget(sum(len(s.train.labels) for s in sites), job).epochs


def pooled_classifier(sites: list[SiteImages], job: FedKTCSDParams) -> nn.Module:
    """The job's classifier, with the job's budget, trained on all sites' real training images together."""
    images = torch.cat([s.train.images for s in sites])
    labels = torch.cat([s.train.labels for s in sites])
    return train_job_ensemble(images, labels, job)


def fedavg_classifier(sites: list[SiteImages], job: FedKTCSDParams, rounds: int) -> nn.Module:
    """The job's ensemble, each member trained by its own FedAvg run (`fedavg_member`) with the member's seed."""
    seeds = member_seeds(job.seed, job.classifier_members)
    return Ensemble([fedavg_member(sites, job, rounds, seed) for seed in seeds])


def fedavg_member(sites: list[SiteImages], job: FedKTCSDParams, rounds: int, seed: int) -> nn.Module:
    """`rounds` rounds of FedAvg: every site trains the global classifier one local epoch on its real training
    images, the server takes the sample-weighted mean."""
    torch.manual_seed(seed)
    global_model = build_classifier(job.image_size, len(job.classes))
    for round_index in range(rounds):
        updates = []
        for site in sites:
            local = build_classifier(job.image_size, len(job.classes))
            local.load_state_dict(global_model.state_dict())
            trained = train_classifier(site.train.images, site.train.labels, len(job.classes), 1,
                                       seed + round_index, model=local, noise_std=job.classifier_noise)
            updates.append(SiteUpdate(site.site, state_dict_to_numpy(trained), len(site.train.labels)))
        load_numpy_params(global_model, weighted_mean(updates))
    return global_model.eval()


def reference_scores(folders: Mapping[str, Path], job: FedKTCSDParams) -> dict[str, dict[str, dict[str, float]]]:
    """Per reference ("FedAvg", "pooled real"), per site: the evaluation round's metrics on the site's held-out
    images. FedAvg runs as many rounds as the pooled classifier makes passes, so each image is seen as often."""
    sites = read_sites(folders, job)
    return {"FedAvg": site_scores(fedavg_classifier(sites, job, pooled_passes(sites, job)), sites, job),
            "pooled real": site_scores(pooled_classifier(sites, job), sites, job)}


def site_scores(model: nn.Module, sites: list[SiteImages], job: FedKTCSDParams) -> dict[str, dict[str, float]]:
    """`evaluate_classifier` on each site's held-out images: what the job's evaluation round returns."""
    return {s.site: evaluate_classifier(model, s.held_out.images, s.held_out.labels, job.classes) for s in sites}
