"""Site side of the federated brain-tumour segmentation job (SegResNet on the site's glioma MRI cases).

Each `train` task: score the received global model on the site's validation cases (sliding-window inference, one
BraTS label map per case, Dice and HD95 per region: site_agent.segmentation.metrics),
train it for `local_epochs` on the training cases, optionally privatise the update (clip + Gaussian noise on the
weight difference), and send the weights with the number of training cases. The `validate` task only scores the
received model; the `test` task scores the model the server selected on the site's test cases. Each case's scores
stay at the site, in `<workspace>/segmentation/<job id>/case_results.csv`; only per-site means and counts are
sent. With `cross_site_evaluation`, after the rounds the site sends its final local model where its policy allows
(`local_model`) and scores each model it is sent on its held-out cases (`cross_validate`; server_app.cross_site).
Metrics also go to TensorBoard through FLARE's experiment tracking when the job names a writer. What leaves
the site is listed in docs/segmentation.md.

How the site feeds its device is the site's setting (`site_agent.kit.site_config.ComputeSettings`: loader workers,
cases cached in memory or on disk), never the job's; on a GPU the first training task checks the job's batch size
and ROI against the GPU's free memory before reading a case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from torch import nn

from fl_contract.evaluation import WITHHELD
from fl_contract.job_params import SegmentationParams, job_params
from fl_contract.labels import LABEL_MAPS, REGIONS
from fl_contract.models import build_model, load_numpy_params, state_dict_to_numpy
from fl_contract.precision import select_precision
from fl_contract.segmentation import (
    CROSS_VALIDATE_TASK,
    DP_EPSILON,
    DP_NOISE_STD,
    LOCAL_MODEL_SENT,
    MODEL,
    MODEL_NAME,
    TEST,
    TRAIN_LOSS,
    VAL,
)
from fl_contract.tracking import sender_id
from site_agent.data.pipeline import surface_data_errors
from site_agent.privacy.accounting import client_dp_epsilon
from site_agent.segmentation.data import SiteData, load_site_data
from site_agent.segmentation.dp import noise_std, privatise_update
from site_agent.segmentation.memory import GIB, check_training_memory, estimate_training_memory
from site_agent.segmentation.metrics import append_case_results, case_results_path, score_cases, site_summary
from site_agent.segmentation.training import train_epochs
from site_agent.tasks.executor import SiteContext, TrackedTask


class SegmentationTask(TrackedTask):
    """SegResNet training at a site: sigmoid Dice loss, Adam, MONAI's BraTS augmentation, AMP on CUDA."""

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, SegmentationParams)
        super().__init__(seed=job.seed, analytic_sender_id=sender_id(job.tracking))
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job
        self.model_args = job.model_args()
        self._data: dict[Path, SiteData] = {}
        self._memory_checked = False
        self._local_model: dict[str, np.ndarray] | None = None  # trained in the last round, for cross-site evaluation

    def task_train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        with surface_data_errors():  # cases beyond cache_rate are read (and may fail) during the round
            return self.train(model, ctx)

    def task_validate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        return self._scored(model, ctx, VAL, "validate")

    def task_test(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Score the model the server selected on validation (sent once, after the last round) on the test cases."""
        return self._scored(model, ctx, TEST, "test")

    def task_local_model(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Cross-site evaluation: this site's final local model (trained in the last round, before any DP), where
        the job and the site's policy let it leave; else only the reason, in `meta.withheld`."""
        refusal = self.job.local_models_refusal() or self._local_model_refusal(ctx)
        if refusal or self._local_model is None:
            self.logger.info(f"local model kept at the site: {refusal}")
            return FLModel(metrics={LOCAL_MODEL_SENT: 0.0}, meta={WITHHELD: refusal})
        self.note_for_audit(local_model="sent for cross-site evaluation (share_local_model)")
        return FLModel(params=dict(self._local_model), params_type=ParamsType.FULL, metrics={LOCAL_MODEL_SENT: 1.0})

    def task_cross_validate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Cross-site evaluation: score one model (the global one or a site's local one, named in its meta) on
        this site's held-out cases, as the test task scores the selected model."""
        split = self.job.cross_site_split()
        if split is None:
            raise RuntimeError("the job has no cross-site evaluation (cross_site_evaluation is false)")
        name = str((model.meta or {}).get(MODEL_NAME, "unnamed"))
        with surface_data_errors():
            data = self.site_data(ctx)
            metrics = self.score(self.network(model.params, ctx.device), data, split, ctx, model,
                                 f"{CROSS_VALIDATE_TASK} {name}")
        return FLModel(metrics=metrics)

    def _local_model_refusal(self, ctx: SiteContext) -> str:
        """Why this site keeps its local model (its policy, or no model trained by this job process), or ""."""
        try:
            policy = ctx.policy()
        except RuntimeError as missing:
            return str(missing)
        if not policy.share_local_model:
            return "the site's policy keeps its local model (share_local_model is false)"
        if self._local_model is None:
            return "the site holds no local model of this job: its job process trained in no round (it restarted)"
        return ""

    def _scored(self, model: FLModel, ctx: SiteContext, split: str, task: str) -> FLModel:
        with surface_data_errors():
            data = self.site_data(ctx)
            metrics = self.score(self.network(model.params, ctx.device), data, split, ctx, model, task)
        self.track(metrics, int(model.current_round or 0))  # step: rounds aggregated into the model scored
        return FLModel(metrics=metrics)

    def train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Score the received model, train it locally, privatise the update when DP is on."""
        self.check_gpu_memory(ctx.device)
        data = self.site_data(ctx)
        net = self.network(model.params, ctx.device)
        metrics = self.score(net, data, VAL, ctx, model, "train")
        workers = ctx.config.compute.loader_workers
        self.logger.info(f"training on {ctx.device} with {select_precision(ctx.device).describe()}: "
                         f"{len(data.split.train)} cases, {self.job.local_epochs} epoch(s), ROI {self.job.roi_size}, "
                         f"batch {self.job.batch_size}, {workers} loader worker(s)")
        optimizer = torch.optim.Adam(net.parameters(), lr=self.job.learning_rate, weight_decay=self.job.weight_decay)
        loader = data.train_loader(self.job.batch_size, seed=self.seed + 7919 * (model.current_round or 0),
                                   workers=workers, prefetch=ctx.device.type == "cuda")
        metrics[TRAIN_LOSS] = train_epochs(net, loader, optimizer, ctx.device, self.job.local_epochs,
                                           lambda: ctx.abort_signal.triggered)
        params = state_dict_to_numpy(net)
        self._local_model = params
        if self.job.dp_clip_norm > 0:
            # OS entropy, never the job seed: a noise seed the server knows would let it subtract the noise
            params = privatise_update(model.params, params, self.job.dp_clip_norm, self.job.dp_noise_multiplier,
                                      np.random.default_rng())
            metrics[DP_NOISE_STD] = noise_std(self.job.dp_clip_norm, self.job.dp_noise_multiplier)
            if self.job.dp_noise_multiplier > 0:  # clipping alone gives no guarantee to report
                metrics[DP_EPSILON] = client_dp_epsilon(self.job.dp_noise_multiplier, int(model.current_round or 0) + 1)
        self.track(metrics, int(model.current_round or 0))  # step: rounds aggregated into the model scored
        return FLModel(params=params, params_type=ParamsType.FULL, metrics=metrics,
                       meta={FLMetaKey.NUM_STEPS_CURRENT_ROUND: len(data.split.train)})

    def check_gpu_memory(self, device: torch.device) -> None:
        """On a GPU, once per job: refuse a batch size and ROI whose training step cannot fit in the free memory,
        naming the setting to lower (site_agent.segmentation.memory), before any case is read."""
        if device.type != "cuda" or self._memory_checked:
            return
        free, _ = torch.cuda.mem_get_info(device)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # our allocator's cache
        estimate = estimate_training_memory(build_model(MODEL, **self.model_args), len(REGIONS),
                                            select_precision(device))
        needed = check_training_memory(estimate, self.job.batch_size, self.job.roi_size, free)
        self.logger.info(f"batch {self.job.batch_size} at ROI {self.job.roi_size}: "
                         f"about {needed / GIB:.1f} GiB of the GPU's {free / GIB:.1f} GiB free (estimate)")
        self._memory_checked = True

    def site_data(self, ctx: SiteContext) -> SiteData:
        """The site's split and cached datasets, read (and validated) once per job; kept on disk in the site's
        workspace instead of memory when the site's `data_cache` says so."""
        folder = ctx.data_dir(self.job.dataset)
        if folder not in self._data:
            cache_dir = (ctx.workspace_dir / "data_cache" / "segmentation" if ctx.config.compute.data_cache == "disk"
                         else None)
            self._data[folder] = load_site_data(folder, self.job.case_recipe(), cache_dir)
        return self._data[folder]

    def network(self, params: dict[str, np.ndarray], device: torch.device) -> nn.Module:
        net = build_model(MODEL, **self.model_args)
        load_numpy_params(net, params)
        return net.to(device)

    def score(self, net: nn.Module, data: SiteData, split: str, ctx: SiteContext, model: FLModel,
              task: str) -> dict[str, float]:
        """Dice and HD95 of `net` (the global model as received) on the label maps of the `split` cases. Each case's
        row goes to the site's per-case file (never sent); the site's means and case counts are returned."""
        scores = score_cases(net, data.eval_loader(split), self.job.sliding_window(), ctx.device,
                             LABEL_MAPS[self.job.label_map])
        append_case_results(case_results_path(ctx.workspace_dir, ctx.job_id), scores, int(model.current_round or 0),
                            task, split)
        return site_summary(scores, split)
