"""ISIC classifier evaluation: the server sends a four-class dermoscopy classifier it holds (e.g. a finished playerfl
fedavg run's global model); each site scores it on every image of its ISIC-format folder and sends balanced accuracy,
macro-F1, per-class recall and a confusion matrix whose cells of fewer than its policy's min_cases images are empty.

The server needs the model's folder under the `model` key of its local/server_app.json; sites need their ISIC
folder under `dataset` in their site_agent.json. See docs/playerfl.md.
"""

from __future__ import annotations

from fl_contract.job_params.evaluation import IsicEvaluationParams
from jobs.spec import JobKind

KIND = JobKind(
    name="isic-evaluation",
    summary="Score a four-class ISIC classifier the server holds on every site's dermoscopy images: sites send "
            "balanced accuracy, macro-F1, per-class recall and a confusion matrix with cells of fewer than their "
            "policy's min_cases images left empty",
    params=IsicEvaluationParams,
    controller="server_app.evaluation.IsicEvaluationController",
    site_task="site_agent.tasks.isic_evaluation.IsicEvaluationTask",
    dataset_keys=("dataset",),
    resumable=False,  # one task: resubmit it
    guide="docs/playerfl.md",
)

__all__ = ["KIND", "IsicEvaluationParams"]
