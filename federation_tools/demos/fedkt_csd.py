"""FedKT-CSD in `fl-demo`: ISIC-format demo sites, the demo autoencoder (trained once, then cached), a summary.

The demo autoencoder takes a few minutes to train on 2 CPU cores; it is kept in the user's cache
(`$XDG_CACHE_HOME/hospital-fl/`, else `~/.cache/hospital-fl/`) and copied into each demo workspace. Its stored
quality (quality.json: reconstruction PSNR, the reconstruction classifier's score) heads the summary, since it
caps what the synthetic set can teach.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from federation_tools.admin import JobOutcome
from federation_tools.demo_data import isic_demo_site
from federation_tools.demo_job import DemoJob
from fl_contract.models.dcae import load_autoencoder
from jobs.fedkt_csd.spec import KIND, FedKTCSDParams
from site_agent.fedkt_csd.demo_autoencoder import describe_quality, read_quality, train_demo_autoencoder

CACHE_NAME = "demo-dcae-v2"  # v2: many skin tints, colour term, quality.json


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hospital-fl" / CACHE_NAME


def demo_autoencoder(root: Path) -> Path:
    """`<root>/dcae`: copied from the cache, or trained (and cached) on first use."""
    folder, cache = root / "dcae", _cache_dir()
    if not folder.is_dir():
        try:
            load_autoencoder(cache)
        except (OSError, ValueError):
            print(f"training the demo autoencoder once (cached in {cache})", flush=True)
            train_demo_autoencoder(cache)
        shutil.copytree(cache, folder)
    return folder


def site_data(index: int, site: str, root: Path) -> dict[str, str]:
    return {"isic": isic_demo_site(index, site, root), "dcae": str(demo_autoencoder(root))}


def server_models(root: Path) -> dict[str, str]:
    return {"dcae": str(demo_autoencoder(root))}


def summary(outcome: JobOutcome) -> str:
    """The demo's closing report: what the release cost in privacy (epsilon, noise per class, withheld classes) beside
    what the synthetic set is worth (the classifier's scores at each site), so both sides of FedKT-CSD are read
    together."""
    out = outcome.server_app_dir()
    results = json.loads((out / "results.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    counts = "counts public" if manifest["count_multiplier"] is None else f"{manifest['count_multiplier']:.2f} (counts)"
    lines = [describe_quality(read_quality(_cache_dir())),
             f"DP release: epsilon {manifest['epsilon']}, delta {manifest['delta']}, R {manifest['clip_norm']:.2f}, "
             f"{manifest['adjacency']}, noise multiplier {manifest['noise_multiplier']:.4f} (sums, outer products), "
             f"{counts}",
             "per class: records (noisy), noise/signal of the mean and the covariance, "
             "share of the trace that is noise:"]
    for name, d in manifest["diagnostics"].items():
        if d["released"]:
            lines.append(f"  {name}: {d['records']:.0f} records, mean {_number(d['mean_noise_to_signal'], '.2f')}, "
                         f"covariance {_number(d['covariance_noise_to_signal'], '.2f')}, trace "
                         f"{100 * min(d['trace_noise_fraction'], 1.0):.0f}% noise")
        else:
            lines.append(f"  {name}: {d['records']:.0f} records, withheld")
    lines += [f"synthetic images per class: {manifest['samples_per_class']} -> {out / 'synthetic'}",
              f"sample grids: {out / 'grids'}"]
    if "classifier" in results:
        budget = results["classifier"]
        lines.append(f"classifier trained on the synthetic set ({budget['images']} images, {budget['epochs']} passes, "
                     f"{budget['steps']} steps), scored on each site's held-out images:")
    for site, metrics in results.get("evaluation", {}).items():
        recall = ", ".join(f"{name} {value:.2f}" for name, value in metrics["recall"].items())
        lines.append(f"  {site}: accuracy {metrics['accuracy']:.3f}, "
                     f"balanced accuracy {metrics['balanced_accuracy']:.3f} "
                     f"({int(metrics['num_test'])} images; recall {recall})")
    lines += [f"warning: {warning}" for warning in results.get("warnings", [])]
    return "\n".join(lines)


def _number(value: float | None, spec: str) -> str:
    return "noise only" if value is None else format(value, spec)


DEMOS = [DemoJob("fedkt-csd", KIND.name, FedKTCSDParams(evaluate=True), site_data, summary, server_models)]
