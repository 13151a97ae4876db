"""The FedAvg reference job in `fl-demo`: the linear demo data, the reference run's parameters, its weights."""

from __future__ import annotations

import json
from pathlib import Path

from federation_tools.admin import JobOutcome
from federation_tools.demo_job import DemoJob
from jobs.fedavg_linear.spec import KIND, FedAvgLinearParams
from server_app.results import RESULTS_FILE
from site_agent.data.demo.linear_demo import write_linear_site


def site_data(index: int, site: str, root: Path) -> dict[str, str]:
    return {"linear": str(write_linear_site(root / site / "linear", index).parent)}


def summary(outcome: JobOutcome) -> str:
    results = json.loads((outcome.server_app_dir() / RESULTS_FILE).read_text())
    lines = ["round  global w          samples per site"]
    for entry in results["rounds"]:
        w = ", ".join(f"{v:+.3f}" for v in entry["global_weights"]["weight"])
        counts = ", ".join(f"{s}={v['num_samples']}" for s, v in entry["sites"].items())
        lines.append(f"{entry['round']:>5}  [{w}]  {counts}")
    lines.append("reference (docs/algorithms.md): round 1 [1.354, -2.023], round 3 [1.935, -2.898], "
                 "round 5 [1.995, -2.990]")
    return "\n".join(lines)


DEMOS = [DemoJob("fedavg-linear", KIND.name, FedAvgLinearParams(), site_data, summary)]
