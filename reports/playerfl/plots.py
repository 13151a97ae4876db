"""Report figures: per-site scores per method, and PLayer-FL's sensitivity curves with the sites' and the
federation's p."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from reports.playerfl.runs import Run  # noqa: E402


def site_bars(runs: Sequence[Run], score: str, out: Path) -> Path:
    """Grouped bars: for each site, the median over seeds of `score` for every method."""
    methods = sorted({r.method for r in runs})
    sites = sorted({s for r in runs for s in r.evaluation})
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(sites)), 4))
    for i, method in enumerate(methods):
        medians = [np.median([r.evaluation[s][score] for r in runs if r.method == method and s in r.evaluation]
                             or [np.nan])
                   for s in sites]
        ax.bar(np.arange(len(sites)) + i * width, medians, width, label=method)
    ax.set_xticks(np.arange(len(sites)) + 0.4 - width / 2, sites)
    ax.set_ylabel(f"{score} (median over seeds)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def sensitivity_curves(run: Run, out: Path) -> Path:
    """Each site's normalised cumulative curve with its own p, the federation's curve and its split."""
    split = run.split
    if split is None:
        raise ValueError(f"{run.source}: the {run.method} run (seed {run.seed}) recorded no PLayer-FL split to plot")
    layers = split["layers"]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(layers)), 4))
    for site, curve in sorted(split["site_normalised_curves"].items()):
        ax.plot(range(len(layers)), curve, marker=".", alpha=0.6,
                label=f"{site} (own p = {split['site_splits'][site]})")
    ax.plot(range(len(layers)), split["federation_curve"], color="black", linewidth=2, label="federation")
    ax.axvline(split["federated_layers"] - 0.5, color="red", linestyle="--",
               label=f"split: federate {split['federated_layers']} (t={split['threshold']})")
    ax.set_xticks(range(len(layers)), layers, rotation=45, ha="right", fontsize="small")
    ax.set_ylabel(f"F_l, {split['normalisation']}-normalised")
    excluded = sorted(split.get("excluded_sites") or {})
    ax.set_title(f"PLayer-FL sensitivity, seed {run.seed}"
                 + (f" (left out: {', '.join(excluded)})" if excluded else ""))
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
