"""Inference workflow: send one global model the server holds locally to every site, which segments its own cases
and answers with counts and timings only (the flow is `server_app.one_task`'s)."""

from __future__ import annotations

from typing import ClassVar

from fl_contract.job_params import HeldModelParams, InferenceParams
from fl_contract.segmentation import INFERENCE_TASK
from server_app.held_model_task import HeldModelTask


class InferenceController(HeldModelTask):
    """One `infer` task; results.json records each site's counts and timings."""

    PARAMS: ClassVar[type[HeldModelParams]] = InferenceParams
    TASK: ClassVar[str] = INFERENCE_TASK
    WORKFLOW: ClassVar[str] = "inference"
