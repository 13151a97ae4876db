"""Site side of the segmentation evaluation job: score the model the server sends on every labelled case of a
local folder, as a training job's validation does (BraTS 2023 Dice and HD95, legacy and lesion-wise, per region),
and send what the site's policy lets leave (site_agent.segmentation.evaluation_release).

Each case's scores stay at the site in `<workspace>/segmentation/<job id>/case_results.csv`; the key of the
pseudonymised rows, when any were sent, beside it. What leaves is listed in docs/segmentation.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.evaluation import EVAL, EVALUATION_TASK
from fl_contract.job_params import EvaluationParams, job_params
from fl_contract.job_privacy import METRICS
from fl_contract.labels import LABEL_MAPS
from fl_contract.models import build_model, load_numpy_params
from fl_contract.segmentation import CASE_ROWS, MODEL
from site_agent.data.pipeline import surface_data_errors
from site_agent.segmentation.data import labelled_cases_loader
from site_agent.segmentation.evaluation_release import PSEUDONYMS_FILE, evaluation_release, write_pseudonyms
from site_agent.segmentation.metrics import append_case_results, case_results_path, score_cases
from site_agent.tasks.executor import SiteContext, TaskExecutor


class EvaluationTask(TaskExecutor):
    """Scores the received SegResNet on the site's labelled cases (task `evaluate`)."""

    RELEASE: ClassVar[str] = METRICS

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, EvaluationParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job

    def task_evaluate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Under the site's policy as it is when the task runs (`SiteContext.policy`)."""
        policy = ctx.policy()
        net = build_model(MODEL, **self.job.model_args())
        load_numpy_params(net, model.params)
        with surface_data_errors():
            loader = labelled_cases_loader(ctx.data_dir(self.job.dataset), self.job.label_map, self.job.grid,
                                           self.job.resample_ras_1mm)
            scores = score_cases(net.to(ctx.device), loader, self.job.sliding_window(), ctx.device,
                                 LABEL_MAPS[self.job.label_map])
        kept = append_case_results(case_results_path(ctx.workspace_dir, ctx.job_id), scores, 0, EVALUATION_TASK,
                                   EVAL)
        release = evaluation_release(scores, int(policy.min_cases), self.job.case_metrics, policy.share_case_metrics)
        if release.pseudonyms:
            write_pseudonyms(kept.parent / PSEUDONYMS_FILE, release.pseudonyms)
            self.note_for_audit(case_rows=str(len(release.meta[CASE_ROWS])))
        self.logger.info(f"scored {len(scores)} cases; per-case scores kept in {kept}")
        return FLModel(metrics=release.metrics, meta=release.meta)
