"""FedKT-CSD on the demo's sites: the synthetic-set classifier against FedAvg and pooled real images, over seeds.

    .venv/bin/python bench/fedkt_demo.py [--autoencoder FOLDER] [--seeds 0,1,2] [--partition class|site]
                                         [--write-readme]

Each seed draws the demo's three ISIC-format sites afresh (`federation_tools.demos.fedkt_csd.demo_site` with that
seed: the demo's images per site and per-class label skew; seed 0 is the demo's own data) and runs what `fl-demo`'s
fedkt-csd step runs, in one process: the sites' statistics path, their sum as secure aggregation delivers it, the
server's DP release at the demo job's parameters (epsilon 10), the synthetic set through uint8, the evaluation
round's classifier with the job's budget, scored on each site's held-out images. It does so at the demo's parameters
(the job's defaults but one classifier) and with one parameter changed (`VARIANTS`: class covariances shrunk toward
the pooled one, one pooled covariance for all classes, the job's default ensemble of three classifiers instead of
one), each over NOISE_DRAWS DP noise draws, since one draw alone moves the score by more than the difference between
them. Beside it the references of `research.fedkt_references` (FedAvg of the same classifier, and one
trained on the pooled real images) on the same held-out images, and the pooled classifier trained on the
autoencoder's reconstructions of the same training images (what the autoencoder alone costs on the demo's data).
Also the autoencoder's quality gate, recomputed here from the folder's weights. Default autoencoder: the demo one
this project ships.

`--partition site` draws the labels per site instead (each site's class shares from Dirichlet(0.5); the demo's
other jobs' skew): sites that hold one or two classes, where FedAvg struggles, and classes that can be rare in the
whole federation, where a DP release struggles. Its table goes in its own README section.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import source_checkout  # noqa: F401  (sys.path: research/ and tests/harness/ of this checkout)
import torch
from readme_section import write_section

from federation_tools.demo_data import DEMO_SITES
from federation_tools.demos.fedkt_csd import DEMO_AUTOENCODER, DEMO_PARAMS, PARTITION, demo_site
from fl_contract.fedkt_csd.classifier import train_job_ensemble
from fl_contract.fedkt_csd.protocol import RECALL_PREFIX, weighted_balanced_accuracy
from fl_contract.fedkt_csd.wire import ClassStatistics, from_ring
from fl_contract.models.dcae import LoadedAutoencoder, load_autoencoder
from jobs.fedkt_csd.spec import FedKTCSDParams
from research.fedkt_references import (
    pooled_classifier,
    read_sites,
    reference_scores,
    site_scores,
)
from server_app.fedkt_outputs import to_uint8
from server_app.fedkt_release import (
    ClassGaussians,
    decode_latents,
    release_class_gaussians,
    sample_latents,
    synthetic_counts,
)
from server_app.privacy.dp_calibration import calibrate_noise
from site_agent.data.demo.label_skew import PARTITIONS
from site_agent.fedkt_csd.demo_autoencoder import measure_quality, passes_quality_gate, reconstruct
from site_agent.fedkt_csd.latent_classifier import LatentGaussianClassifier
from site_agent.fedkt_csd.site_data import LabelledImages, statistics_vector

VARIANTS: dict[str, dict[str, Any]] = {  # FedKT-CSD runs: the job's parameters they change
    "FedKT-CSD (the demo's parameters)": {}, "FedKT-CSD, shrunk covariances": {"covariance": "shrunk"},
    "FedKT-CSD, pooled covariance": {"covariance": "pooled"},
    "FedKT-CSD, ensemble of three": {"classifier_members": 3}}
LATENT = "FedKT-CSD's released Gaussians on the latents"  # the evaluation round's `latent_evaluation`
METHODS = (*VARIANTS, LATENT, "FedAvg", "pooled real", "pooled reconstructions")
NOISE_DRAWS = 2  # DP noise draws per seed: one draw moved the score by up to 0.16 at the same data


def summed_statistics(ae: LoadedAutoencoder, folders: dict[str, Path], job: FedKTCSDParams) -> ClassStatistics:
    """The sites' statistics vectors summed, as secure aggregation delivers them to the server."""
    total = sum(statistics_vector(ae, folder, job.classes, job.image_size, job.holdout_fraction, job.seed)
                for folder in folders.values())
    return from_ring(np.asarray(total, dtype=np.uint64), len(job.classes), ae.clip_norm)


def released_gaussians(ae: LoadedAutoencoder, stats: ClassStatistics, job: FedKTCSDParams,
                       noise_seed: int) -> ClassGaussians:
    """The job's DP release of the class Gaussians, with the given noise seed."""
    calibration = calibrate_noise(job.epsilon, job.delta, ae.clip_norm, job.adjacency,  # type: ignore[arg-type]
                                  job.method, job.count_noise_multiplier)  # type: ignore[arg-type]
    return release_class_gaussians(stats, calibration, noise_seed, min_count=job.min_count,
                                   covariance=job.covariance).gaussians


def synthetic_set_classifier(ae: LoadedAutoencoder, stats: ClassStatistics, job: FedKTCSDParams,
                             noise_seed: int) -> torch.nn.Module:
    """The job's release and evaluation-round classifier (or ensemble), in one process."""
    gaussians = released_gaussians(ae, stats, job, noise_seed)
    latents, labels = sample_latents(gaussians, synthetic_counts(gaussians.counts, job.samples_per_class), job.seed)
    images = torch.from_numpy(to_uint8(decode_latents(ae.model, latents, job.image_size))).float() / 255.0
    return train_job_ensemble(images, torch.from_numpy(labels), job)


Scores = dict[str, dict[str, float]]  # per site: the evaluation round's metrics on its held-out images
Counts = dict[str, dict[str, int]]  # per site: its held-out images of each class


@dataclass(frozen=True)
class SeedRuns:
    """One data seed: per method, one `Scores` per run, and the sites' held-out class counts they were scored on."""

    runs: dict[str, list[Scores]]
    held_out: Counts


def one_seed(ae: LoadedAutoencoder, root: Path, seed: int, partition: str) -> SeedRuns:
    """Per method, one `Scores` per run: NOISE_DRAWS DP noise draws (seeds seed + 100 k) for each FedKT-CSD
    variant, one run for each reference."""
    folders = {f"site-{i}": Path(demo_site(i, f"site-{i}", root, seed, partition)) for i in range(1, DEMO_SITES + 1)}
    sites = read_sites(folders, DEMO_PARAMS)
    held_out = {s.site: {name: int((s.held_out.labels == k).sum()) for k, name in enumerate(DEMO_PARAMS.classes)}
                for s in sites}
    stats = summed_statistics(ae, folders, DEMO_PARAMS)
    runs: dict[str, list[Scores]] = {
        method: [site_scores(synthetic_set_classifier(ae, stats, replace(DEMO_PARAMS, **changes),
                                                      noise_seed=seed + 100 * draw), sites, DEMO_PARAMS)
                 for draw in range(NOISE_DRAWS)]
        for method, changes in VARIANTS.items()}
    releases = [released_gaussians(ae, stats, DEMO_PARAMS, seed + 100 * draw) for draw in range(NOISE_DRAWS)]
    latent = [LatentGaussianClassifier(ae, g.classes, g.means, g.covariances, DEMO_PARAMS.classes) for g in releases]
    runs[LATENT] = [site_scores(classifier, sites, DEMO_PARAMS) for classifier in latent]
    decoded = [replace(s, train=LabelledImages(reconstruct(ae.model, s.train.images), s.train.labels)) for s in sites]
    references = {**reference_scores(folders, DEMO_PARAMS),
                  "pooled reconstructions": site_scores(pooled_classifier(decoded, DEMO_PARAMS), sites, DEMO_PARAMS)}
    return SeedRuns({**runs, **{method: [scores] for method, scores in references.items()}}, held_out)


def mean_score(runs: list[Scores]) -> float:
    return float(np.mean([weighted_balanced_accuracy(r) for r in runs]))


def lowest_recall(runs: list[Scores]) -> float:
    return min(v for r in runs for m in r.values() for k, v in m.items() if k.startswith(RECALL_PREFIX))


def lowest_federation_recall(runs: list[Scores], held_out: Counts) -> float:
    """The lowest recall of any class on all sites' held-out images together (each site's recall weighted by its
    held-out images of the class): whether the classifier learnt the class at all, which one site's handful of
    images of a class cannot say."""
    recalls = []
    for scores in runs:
        for name in DEMO_PARAMS.classes:
            images = sum(held_out[site][name] for site in scores)
            hits = sum(held_out[site][name] * scores[site].get(RECALL_PREFIX + name, 0.0) for site in scores)
            recalls.append(hits / images)
    return min(recalls)


def method_table(seeds: dict[int, SeedRuns], value: Callable[[SeedRuns, str], float], spec: str,
                 with_mean: bool = False) -> list[str]:
    """A markdown table of `value` per method (rows) and data seed (columns), and with `with_mean` their mean."""
    lines = ["| method | " + " | ".join(f"seed {s}" for s in seeds) + (" | mean |" if with_mean else " |"),
             "| --- | " + " | ".join("---:" for _ in seeds) + (" | ---: |" if with_mean else " |")]
    for method in METHODS:
        values = [value(s, method) for s in seeds.values()]
        cells = [spec.format(v) for v in values] + ([spec.format(np.mean(values))] if with_mean else [])
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def table(seeds: dict[int, SeedRuns], partition: str, quality: dict[str, Any], seconds: float) -> str:
    job = DEMO_PARAMS
    gate = "passes" if passes_quality_gate(quality) else "fails"
    lines = [f"Demo sites (3, seeds {', '.join(map(str, seeds))}, labels skewed per {partition}), classes "
             f"{', '.join(job.classes)}, epsilon {job.epsilon}, delta {job.delta}; FedKT-CSD rows: mean over "
             f"{NOISE_DRAWS} DP noise draws; autoencoder: "
             f"reconstruction classifier {quality['balanced_accuracy_reconstructions']:.3f} vs real "
             f"{quality['balanced_accuracy_real']:.3f} (gate {gate}); {seconds / 60:.1f} min.", "",
             "Site-weighted balanced accuracy on the sites' held-out images:", "",
             *method_table(seeds, lambda s, m: mean_score(s.runs[m]), "{:.3f}", with_mean=True), "",
             "Lowest recall of any class at any site (FedKT-CSD: in any noise draw):", "",
             *method_table(seeds, lambda s, m: lowest_recall(s.runs[m]), "{:.2f}"), "",
             "Lowest recall of any class on all sites' held-out images together (FedKT-CSD: in any noise draw):", "",
             *method_table(seeds, lambda s, m: lowest_federation_recall(s.runs[m], s.held_out), "{:.2f}")]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autoencoder", type=Path, default=DEMO_AUTOENCODER)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--partition", choices=PARTITIONS, default=PARTITION)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    ae = load_autoencoder(args.autoencoder)
    started = time.monotonic()
    quality = measure_quality(ae.model)
    runs: dict[int, SeedRuns] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            runs[seed] = one_seed(ae, Path(tmp) / f"seed-{seed}", seed, args.partition)
            print(f"seed {seed}: " + ", ".join(f"{m} {mean_score(runs[seed].runs[m]):.3f}" for m in METHODS),
                  flush=True)
    text = table(runs, args.partition, quality, time.monotonic() - started)
    print(text)
    if args.write_readme:
        write_section("fedkt_demo" if args.partition == PARTITION else f"fedkt_demo_{args.partition}", text)


if __name__ == "__main__":
    main()
