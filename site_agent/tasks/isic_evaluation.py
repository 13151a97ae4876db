"""Site side of the ISIC evaluation job: score the classifier the server sends on every image of the site's four
classes, read and normalised as a PLayer-FL site reads its test images, and send what the site's policy lets leave
(site_agent.classification.evaluation_release). No image, file name or per-image prediction leaves.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from nvflare.app_common.abstract.fl_model import FLModel
from torch.utils.data import DataLoader

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.job_params import IsicEvaluationParams, job_params
from fl_contract.job_privacy import METRICS
from fl_contract.models import build_model, load_numpy_params
from site_agent.classification.evaluation_release import isic_release
from site_agent.data.isic import read_isic_site
from site_agent.data.pipeline import surface_data_errors
from site_agent.playerfl.data import IsicImages
from site_agent.tasks.executor import SiteContext, TaskExecutor

BATCH = 32


class IsicEvaluationTask(TaskExecutor):
    """Scores the received classifier on the site's ISIC images (task `evaluate`)."""

    RELEASE: ClassVar[str] = METRICS

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, IsicEvaluationParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job

    @torch.no_grad()
    def task_evaluate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Under the site's policy as it is when the task runs (`SiteContext.policy`)."""
        policy = ctx.policy()
        network, arguments = self.job.model_spec()
        net = build_model(network, **arguments)
        load_numpy_params(net, model.params)
        net.to(ctx.device).eval()
        truth, predicted = [], []
        with surface_data_errors():
            records = read_isic_site(ctx.data_dir(self.job.dataset), classes=PLAYERFL_CLASSES)
            for images, labels in DataLoader(IsicImages(records, self.job.image_size), batch_size=BATCH):
                truth.append(labels.numpy())
                predicted.append(net(images.to(ctx.device)).argmax(dim=1).cpu().numpy())
        metrics, meta = isic_release(np.concatenate(truth), np.concatenate(predicted), PLAYERFL_CLASSES,
                                     int(policy.min_cases))
        self.logger.info(f"scored {len(records)} images")
        return FLModel(metrics=metrics, meta=meta)
