"""Site side of the segmentation inference job: segment every case in a local folder with the model the server
sends, write the results into a local output folder, and send back only counts and timings.

The cases (four modalities each; labels are not needed) come from the job's `dataset` key and the results go to a
folder of the job's `output` key, both mapped in the site's site_agent.json, under one sub-folder per job:
`<output>/<job id>/<case id>.nii.gz` and, for DICOM cases, `<case id>.seg.dcm`. The case identifiers, paths and
label maps never leave the site.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, cast

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.job_params import InferenceParams, job_params
from fl_contract.job_privacy import COUNTS
from fl_contract.labels import LABEL_MAPS
from fl_contract.models import build_model, load_numpy_params
from fl_contract.segmentation import (
    CASES_SEGMENTED,
    DICOM_SEGS_WRITTEN,
    MODEL,
    SECONDS_PER_CASE_MAX,
    SECONDS_PER_CASE_MEAN,
    SECONDS_TOTAL,
)
from site_agent.data.brats_case import GridPolicy, discover_cases
from site_agent.data.pipeline import surface_data_errors
from site_agent.segmentation.inference import segment_cases
from site_agent.tasks.executor import SiteContext, TaskExecutor


class InferenceTask(TaskExecutor):
    """Runs the received SegResNet on the site's unlabelled cases (task `infer`)."""

    RELEASE: ClassVar[str] = COUNTS

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, InferenceParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job
        self.model_args = job.model_args()
        self.model_description = f"{job.model}/{job.model_file}"
        self.grid = cast(GridPolicy, job.grid)

    def task_infer(self, model: FLModel, ctx: SiteContext) -> FLModel:
        started = time.perf_counter()
        with surface_data_errors():
            cases = discover_cases(ctx.data_dir(self.job.dataset), require_labels=False)
        net = build_model(MODEL, **self.model_args)
        load_numpy_params(net, model.params)
        out_dir = ctx.data_dir(self.job.output) / ctx.job_id
        self.logger.info(f"segmenting {len(cases)} cases on {ctx.device} into {out_dir}")
        outputs = segment_cases(net.to(ctx.device), cases, out_dir, self.job.sliding_window(), ctx.device,
                                LABEL_MAPS[self.job.label_map], self.model_description, self.grid,
                                self.job.resample_ras_1mm, lambda: ctx.abort_signal.triggered)
        seconds = np.array([o.seconds for o in outputs] or [0.0])
        self.logger.info(f"wrote {len(outputs)} label maps into {out_dir}")
        return FLModel(metrics={CASES_SEGMENTED: float(len(outputs)),
                                DICOM_SEGS_WRITTEN: float(sum(o.dicom_seg is not None for o in outputs)),
                                SECONDS_TOTAL: time.perf_counter() - started,
                                SECONDS_PER_CASE_MEAN: float(seconds.mean()),
                                SECONDS_PER_CASE_MAX: float(seconds.max())})
