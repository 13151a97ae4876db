"""Site side of the PLayer-FL job and its baselines: one executor, the method chosen by a job parameter.

Each `train` task: load the received layers over the site's own model, validate the model the site would deploy
(snapshotting the best), train locally, and return the shared layers. What differs per method is the method's
strategy (`site_agent.playerfl.methods`, over the contract in `fl_contract.playerfl.methods`); PLayer-FL's
sensitivity curve, measured by its strategy after the first local epoch, is sent when its contract says so. The
final `evaluate` task scores the best-validation snapshot (FedBABU: its fine-tuned model) on the site's held-out
test split; with cross-site evaluation a `score_global` task scores the server's whole global model on it too.
Metrics also go to TensorBoard through FLARE's experiment tracking when the job names a writer. What leaves the
site per method is listed in docs/playerfl.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from nvflare.apis.fl_constant import FLContextKey, FLMetaKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from torch import nn
from torch.utils.data import DataLoader

from fl_contract.job_meta import RESUMED_FROM_KEY
from fl_contract.job_params import PLayerFLParams, job_params
from fl_contract.models import build_model, load_numpy_params
from fl_contract.playerfl import protocol
from fl_contract.playerfl.layers import Layer, model_layers, prefix_keys
from fl_contract.tracking import sender_id
from site_agent.data.isic import IsicRecord
from site_agent.playerfl.data import IsicImages, SiteSplits, class_weights, load_site_splits
from site_agent.playerfl.methods import MethodOptions, SiteMethod, site_method
from site_agent.playerfl.state import SiteState, latest_state, save_state, state_folder
from site_agent.playerfl.training import LocalTrainer, LossFn, evaluate, focal_loss
from site_agent.tasks.executor import SiteContext, TrackedTask

FINETUNE_ROUND = -1  # the shuffling stream of the local steps before the final evaluation (FedBABU's fine-tuning)


@dataclass(frozen=True)
class _Site:
    """Per job and site: the data, the loss weighted by the site's class frequencies, and where the state lives."""

    train: IsicImages
    val: DataLoader[Any]
    test: DataLoader[Any]
    loss_fn: LossFn
    state_folder: Path


class PLayerFLTask(TrackedTask):
    """PLayer-FL and its baselines at a site (reference hyper-parameters: docs/algorithms.md#baselines)."""

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, PLayerFLParams)
        super().__init__(seed=job.seed, analytic_sender_id=sender_id(job.tracking))
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job
        options = MethodOptions(job.fedprox_mu, job.ditto_lambda, job.fedlp_keep, job.pfedme_lambda,
                                job.pfedme_steps, job.finetune_epochs, job.seed)
        self._strategy: SiteMethod = site_method(job.method, options)
        self.model_args = job.model_arguments()
        self._job_id = "job"
        self._site: _Site | None = None

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        # the state is per job (jobs never see each other's state); a job the server resumed continues its first run's
        meta = fl_ctx.get_prop(FLContextKey.JOB_META) or {}
        self._job_id = str(meta.get(RESUMED_FROM_KEY) or fl_ctx.get_job_id() or "job")
        return super().execute(task_name, shareable, fl_ctx, abort_signal)

    @cached_property
    def layers(self) -> list[Layer]:
        return model_layers(self._new_model())

    # ---- tasks -------------------------------------------------------------------------------------------------

    def task_train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """One PLayer-FL round at the site: score the received model, train by the method's strategy, keep the whole
        model as the site's own state, and send only the shared layers (with the sensitivity curve in the round the
        method owes it): the personal layers never leave the site."""
        site, state, net = self._prepare(model, ctx)
        round_number = int(model.current_round or 0)
        trainer = self._trainer(site, state, round_number, ctx.device)
        metrics = self._validate(site, state, net, trainer, round_number) if round_number > 0 else {}
        received = {k: v.detach().clone() for k, v in net.state_dict().items()}
        local = self._strategy.train(net, received, state, trainer)
        metrics["train_loss"] = local.loss
        meta: dict[str, Any] = {FLMetaKey.NUM_STEPS_CURRENT_ROUND: len(site.train)}
        if self._strategy.contract.sends_sensitivity(round_number):
            if local.sensitivity is None:
                raise RuntimeError(f"method {self.job.method} owes its sensitivity curve in round {round_number + 1}")
            # In the clear the curve carries its weight in the federation's mean; with secure_aggregation the
            # sample count leaves only inside the masked vector, and the server averages the curves unweighted.
            meta[protocol.SENSITIVITY] = {**local.sensitivity.to_meta(),
                                          **self._clear_count(protocol.CURVE_SAMPLES, len(site.train))}
        state.model = net.state_dict()
        save_state(state, site.state_folder, round_number)
        self.track(metrics, round_number)
        shared = self.layers[: int(model.meta[protocol.SHARED_LAYERS])]
        upload = _layer_values(net, self._strategy.upload(shared, ctx.site_name, round_number))
        if not upload:  # Local, or FedLP dropping every layer: only the sample count and metrics leave the site
            return FLModel(metrics=metrics, meta=meta)
        return FLModel(params=upload, params_type=ParamsType.FULL, metrics=metrics, meta=meta)

    def task_evaluate(self, model: FLModel, ctx: SiteContext) -> FLModel:
        site, state, net = self._prepare(model, ctx)
        final_round = int(model.total_rounds or 0)
        trainer = self._trainer(site, state, FINETUNE_ROUND, ctx.device)
        self._strategy.before_evaluation(net, state, trainer)
        metrics = self._validate(site, state, net, trainer, final_round)
        save_state(state, site.state_folder, int(model.current_round or 0))
        if self._strategy.selects_best_snapshot:
            # _validate has just offered a snapshot, and a macro-F1 always beats the initial -inf
            if state.best is None:
                raise RuntimeError(f"site {ctx.site_name}: no best-validation snapshot to evaluate")
            chosen, best_round, best_score = trainer.model_from(state.best), state.best_round, state.best_score
        else:
            chosen, best_round, best_score = (self._strategy.deployed(net, state, trainer), final_round,
                                              metrics["val_macro_f1"])
        test = evaluate(chosen, site.test, trainer.device)
        metrics = {**metrics, "test_macro_f1": test["macro_f1"], "test_balanced_accuracy": test["balanced_accuracy"],
                   "best_round": best_round, "best_val_macro_f1": best_score}
        self.track(metrics, final_round)
        return FLModel(metrics=metrics, meta=self._clear_count(FLMetaKey.NUM_STEPS_CURRENT_ROUND, len(site.train)))

    def task_score_global(self, model: FLModel, ctx: SiteContext) -> FLModel:
        """Cross-site evaluation: the server's whole global model, as sent, on the test split the final evaluation
        scored the site's personalised model on; the site's own state is neither read nor changed, and only the two
        scores leave."""
        self._check_method(model, ctx)
        received = model.params or {}
        expected = prefix_keys(self.layers, len(self.layers))
        if sorted(received) != sorted(expected):
            raise ValueError(f"site {ctx.site_name}: the server sent {len(received)} parameters as its global model, "
                             f"expected all {len(expected)} of the model's")
        net = self._new_model().to(ctx.device)
        load_numpy_params(net, received)
        test = evaluate(net, self._load_site(ctx).test, ctx.device)
        return FLModel(metrics={"test_macro_f1": test["macro_f1"], "test_balanced_accuracy": test["balanced_accuracy"]})

    def _clear_count(self, key: str, count: int) -> dict[str, int]:
        """The site's training-set size under `key`, or nothing with secure_aggregation: the count is the site's
        to keep then (it leaves only masked, inside the training round's vector), in every answer."""
        return {} if self.job.secure_aggregation else {key: count}

    # ---- steps -------------------------------------------------------------------------------------------------

    def _check_method(self, model: FLModel, ctx: SiteContext) -> None:
        sent_method = (model.meta or {}).get(protocol.METHOD)
        if sent_method != self.job.method:
            raise ValueError(f"site {ctx.site_name} runs method {self.job.method!r} but the server runs "
                             f"{sent_method!r}; fix the job")

    def _prepare(self, model: FLModel, ctx: SiteContext) -> tuple[_Site, SiteState, nn.Module]:
        """Check the method, load data and state, and put the received layers over the site's own model."""
        self._check_method(model, ctx)
        site = self._load_site(ctx)
        previous = int(model.current_round or 0) - 1  # the state this round starts from: after the previous round
        saved = latest_state(site.state_folder, previous) if previous >= 0 else None
        if saved is not None and saved[0] < previous:
            self.logger.info(f"site {ctx.site_name} is back at round {previous + 2} with its state after round "
                             f"{saved[0] + 1}")
        elif saved is None and previous >= 0:
            self.logger.warning(f"site {ctx.site_name} has no saved state of this job before round {previous + 2}: "
                                "it takes part from here as a new participant (fresh personal layers)")
        state = saved[1] if saved is not None else self._strategy.fresh_state(self._new_model().state_dict())
        net = self._new_model().to(ctx.device)
        net.load_state_dict(state.model)
        received = model.params or {}
        expected = prefix_keys(self.layers, int(model.meta[protocol.SHARED_LAYERS]))
        if sorted(received) != sorted(expected):
            raise ValueError(f"site {ctx.site_name}: the server sent {len(received)} parameters, "
                             f"expected the {len(expected)} of the first {model.meta[protocol.SHARED_LAYERS]} layers")
        load_numpy_params(net, received, strict=False)
        return site, state, net

    def _validate(self, site: _Site, state: SiteState, net: nn.Module, trainer: LocalTrainer,
                  round_number: int) -> dict[str, float]:
        """Score the model this site would deploy now and keep it if it is the best so far."""
        deployed = self._strategy.deployed(net, state, trainer)
        scores = evaluate(deployed, site.val, trainer.device)
        state.offer_snapshot(deployed.state_dict(), scores["macro_f1"], round_number)
        return {"val_macro_f1": scores["macro_f1"], "val_balanced_accuracy": scores["balanced_accuracy"]}


    # ---- helpers -----------------------------------------------------------------------------------------------

    def _new_model(self) -> nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)  # every site starts from the same initial weights
            return build_model(self.job.model, **self.model_args)

    def _trainer(self, site: _Site, state: SiteState, round_number: int, device: torch.device) -> LocalTrainer:
        return LocalTrainer(site.train, self.layers, self._new_model, site.loss_fn, self.job.local_epochs,
                            self.job.batch_size, self.job.learning_rate, self.job.weight_decay, self.seed,
                            round_number, state.optimizers, device)

    def _load_site(self, ctx: SiteContext) -> _Site:
        if self._site is None:
            splits: SiteSplits = load_site_splits(ctx.data_dir(self.job.dataset), self.seed)

            def loader(records: Sequence[IsicRecord]) -> DataLoader[Any]:
                return DataLoader(IsicImages(records, self.job.image_size), batch_size=self.job.batch_size)

            self._site = _Site(IsicImages(splits.train, self.job.image_size, augment=True), loader(splits.val),
                               loader(splits.test), focal_loss(self.job.focal_gamma, class_weights(splits.train)),
                               state_folder(ctx.workspace_dir, self._job_id))
        return self._site


def _layer_values(net: nn.Module, layers: list[Layer]) -> dict[str, np.ndarray]:
    """The values of `layers` in `net`, as the arrays that go on the wire."""
    state = net.state_dict()
    return {k: state[k].detach().cpu().numpy().copy() for layer in layers for k in layer.keys}
