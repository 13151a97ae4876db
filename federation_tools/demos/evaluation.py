"""The evaluation job in `fl-demo`: the segmentation demo's final model scored on every site's cases."""

from __future__ import annotations

import json
from pathlib import Path

from federation_tools.admin import JobOutcome
from federation_tools.demo_job import DemoJob
from jobs.evaluation.spec import KIND, EvaluationParams
from jobs.segmentation.spec import CPU_DEMO
from reports.evaluation import evaluation_text, summary
from server_app.results import RESULTS_FILE

MODEL_KEY = "demo-glioma"
ARCHITECTURE = {k: v for k, v in CPU_DEMO.items() if k in ("roi_size", "init_filters", "blocks_down", "blocks_up",
                                                            "dropout_prob")}


def site_data(index: int, site: str, root: Path) -> dict[str, str]:
    """The segmentation demo's cases (it writes them; this job scores the model trained on them)."""
    return {"brats": str(root / site / "brats")}


def report(outcome: JobOutcome) -> str:
    table = summary(json.loads((outcome.server_app_dir() / RESULTS_FILE).read_text()))
    withheld = [f"{site} withheld {what}: {why}" for site, kept in sorted(table["withheld"].items())
                for what, why in sorted(kept.items())]
    return "\n".join([evaluation_text(table), *withheld,
                      f"the consortium's page: fl-seg-report {outcome.result_dir} --out report/"])


DEMOS = [DemoJob("brats-evaluation", KIND.name,
                 EvaluationParams(model=MODEL_KEY, case_metrics=True, min_clients=3, **ARCHITECTURE), site_data,
                 report, model_from="brats-segmentation")]
