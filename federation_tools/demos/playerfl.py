"""PLayer-FL vs FedAvg in `fl-demo`: the demo's ISIC-format sites, a narrow CNN5 at 32x32, 4 rounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from federation_tools.admin import JobOutcome
from federation_tools.demo_data import isic_demo_site
from federation_tools.demo_job import DemoJob
from jobs.playerfl.spec import KIND, PLayerFLParams
from server_app.results import RESULTS_FILE

# Enough optimiser steps (~4 rounds x 4 epochs x 8 batches) for the narrow CNN5 to leave the majority-class plateau
# on the demo's ~60 training images per site; measured in the simulator: about 40 s per method on 2 CPU cores.
DEMO_JOB_ARGS: dict[str, Any] = {
    "num_rounds": 4, "local_epochs": 4, "image_size": 32, "batch_size": 8, "learning_rate": 3e-3,
    "min_clients": 3, "model_args": {"channels": [8, 16, 32, 64, 64], "hidden": 32},
}


def site_data(index: int, site: str, root: Path) -> dict[str, str]:
    return {"isic": isic_demo_site(index, site, root)}


def summary(outcome: JobOutcome) -> str:
    """Per-site held-out scores, the federation's weighted score and fairness, and PLayer-FL's split."""
    results = json.loads((outcome.server_app_dir() / RESULTS_FILE).read_text())
    lines = ["site     macro-F1  balanced acc"]
    lines += [f"{site:<8} {m['test_macro_f1']:>8.3f}  {m['test_balanced_accuracy']:>12.3f}"
              for site, m in sorted(results["evaluation"].items())]
    s = results["summary"]
    lines.append(f"federation (weighted by training size): macro-F1 {s['test_macro_f1']:.3f}, balanced accuracy "
                 f"{s['test_balanced_accuracy']:.3f}; "
                 f"fairness (variance of macro-F1) {s['test_macro_f1_variance']:.4f}")
    lines.append(f"federated layers: {results['federated_layers']} (the rest stay at each site)")
    return "\n".join(lines)


DEMOS = [DemoJob("playerfl", KIND.name, PLayerFLParams(method="playerfl", **DEMO_JOB_ARGS), site_data, summary),
         DemoJob("playerfl-fedavg", KIND.name, PLayerFLParams(method="fedavg", **DEMO_JOB_ARGS), site_data, summary)]
