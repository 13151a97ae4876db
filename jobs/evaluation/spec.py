"""Segmentation evaluation: the server sends a model it holds locally (a finished run's global model, a vendor's or a
published SegResNet checkpoint of the declared architecture and label map); each site scores it on its labelled
cases with the BraTS 2023 metrics and sends aggregate scores only, per-case rows where its policy allows.

The server needs the model's folder under the `model` key of its local/server_app.json; sites need their labelled
cases under `dataset` in their site_agent.json. See docs/segmentation.md.
"""

from __future__ import annotations

from fl_contract.job_params.evaluation import EvaluationParams
from jobs.spec import JobKind

KIND = JobKind(
    name="brats-evaluation",
    summary="Score a model the server holds on every site's labelled glioma MRI cases (BraTS 2023 Dice and HD95, "
            "legacy and lesion-wise, per region): sites send means, quartiles over at least their min_cases cases, "
            "and per-case rows only where their policy allows",
    params=EvaluationParams,
    controller="server_app.evaluation.EvaluationController",
    site_task="site_agent.tasks.evaluation.EvaluationTask",
    dataset_keys=("dataset",),
    resumable=False,  # one task: resubmit it
    guide="docs/segmentation.md",
)

__all__ = ["KIND", "EvaluationParams"]
