"""Site side of the data-summary job: count the site's cases (images) as a training job with the summary's parameters
would read them, and send the counts and quantiles its policy lets leave (site_agent.summary.release), or the
privacy officer's reviewed export.

The readers' messages about refused cases stay at the site in `<workspace>/data_summary/<job id>/refused_cases.txt`.
What leaves is listed in docs/data-summary.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.data_summary import SUMMARY_META
from fl_contract.job_params import DataSummaryParams, job_params
from fl_contract.job_privacy import SUMMARY
from site_agent.summary.export import PROBLEMS_FILE, read_reviewed, sha256, summary_text
from site_agent.tasks.executor import SiteContext, TaskExecutor


class DataSummaryTask(TaskExecutor):
    """Answers the `summarize` task with the summary's JSON text (UTF-8 bytes as one uint8 array), nothing else."""

    RELEASE = SUMMARY

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, DataSummaryParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job

    def task_summarize(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Under the site's policy as it is when the task runs (`SiteContext.policy`)."""
        min_count = int(ctx.policy().min_count)
        if self.job.reviewed_summary:
            text = read_reviewed(ctx.data_dir(self.job.reviewed_summary), self.job, min_count)
            self.note_for_audit(reviewed=self.job.reviewed_summary)
        else:
            text, problems = summary_text(ctx.data_dir(self.job.dataset), self.job, min_count)
            kept = ctx.workspace_dir / "data_summary" / ctx.job_id / PROBLEMS_FILE
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(problems)
            if problems:
                self.logger.info(f"{len(problems.splitlines())} cases a training job would refuse: see {kept}")
        self.note_for_audit(summary_sha256=sha256(text))
        return FLModel(params={SUMMARY_META: np.frombuffer(text.encode(), dtype=np.uint8)})
