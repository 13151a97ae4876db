"""PLayer-FL on the server: the partial-federation controller, its update checks and its per-layer averaging.

What differs per method is the method's contract (`fl_contract.playerfl.methods`: what is federated, when curves
come, whether a split is chosen) and, for the methods that choose a split, its rule (`server_app.playerfl_split`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.job_params import PLayerFLParams, job_params
from fl_contract.models import build_model
from fl_contract.params import params_to_json
from fl_contract.playerfl import protocol
from fl_contract.playerfl.layers import Layer, model_layers, prefix_keys
from fl_contract.playerfl.methods import get_method
from server_app.aggregation import (
    RoundIntake,
    SiteUpdate,
    UpdateCheck,
    UpdateRejected,
    Weights,
    aggregate,
    check_sample_count,
    check_update,
    missing_sites,
    reported_samples,
    scalar_metrics,
    site_name,
)
from server_app.checkpoint import Resumed
from server_app.cross_site import personalised_against_global
from server_app.masked_round import MetaCheck
from server_app.metrics import WEIGHT, federation_summary
from server_app.playerfl_split import SPLIT_RULES, SplitInputs
from server_app.round_workflow import RoundMessage, RoundWorkflow

CROSS_SITE_SCORES = ("test_balanced_accuracy", "test_macro_f1")
"""The matrices of PLayer-FL's cross-site evaluation: the scores its final evaluation reports."""


class PLayerFLController(RoundWorkflow):
    """Partial federation: each round averages (sample-weighted) only the first `shared` layers of the sites' models.

    `shared` starts at the method's `initial_shared_layers`; for the methods that choose a split it becomes the p
    their rule chooses (PLayer-FL: from the sites' curves after round 1; PLayer-FL-Random: drawn by seed before
    round 1). The split, the curves, the layers each site sent every round and the sites' held-out scores go into
    results.json.
    """

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job: PLayerFLParams = job_params(kind, params, PLayerFLParams)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self._contract = get_method(self.job.method)
        self.model_args = self.job.model_arguments()

    def setup(self) -> None:
        net = build_model(self.job.model, **self.model_args)
        self.layers = model_layers(net)
        state = net.state_dict()
        self.global_params: Weights = {k: state[k].numpy().copy() for layer in self.layers for k in layer.keys}
        self.shared = self._contract.initial_shared_layers(len(self.layers))
        self.up_front: dict[str, Any] | None = None

    def before_rounds(self) -> None:
        """PLayer-FL-Random draws its split before round 1."""
        if self._contract.split_before_training:
            self.up_front = self._split({}, {}, self.layers)
            self.shared = self.up_front["federated_layers"]

    def round_message(self, round_index: int) -> RoundMessage:
        self.info(f"round {round_index + 1}/{self.job.num_rounds}: sending the first {self.shared} of "
                  f"{len(self.layers)} layers")
        return self._layers_message(self.global_params, self.layers, self.shared)

    def update_check(self, round_index: int) -> UpdateCheck:
        return self._check(self.global_params, self.layers, self.shared, round_index)

    def aggregate(self, round_index: int, intake: RoundIntake, entry: dict[str, Any]) -> None:
        """Average the shared layers; in the round the method chooses its split, choose it from the curves first."""
        if round_index == 0 and self.up_front is not None:
            entry["split"] = self.up_front
        if self._contract.chooses_split(round_index):
            curves = {site: meta[protocol.SENSITIVITY] for site, meta in intake.meta.items()
                      if protocol.SENSITIVITY in meta}
            # with secure_aggregation the sites keep their sizes: every curve weighs the same (docs/playerfl.md)
            weights = {site: 1 if self.masked else int(curve[protocol.CURVE_SAMPLES]) for site, curve in curves.items()}
            entry["split"] = self._split(curves, weights, self.layers)
            self.shared = entry["split"]["federated_layers"]
        if intake.masked is not None:  # the masked sum of the layers sent, each over the sites that sent it
            moved = intake.masked.applied_to(self.global_params)
            self.global_params.update({k: moved[k] for k in prefix_keys(self.layers, self.shared)})
        else:
            self.global_params.update(aggregate_layers(intake.updates, self.layers[:self.shared], self.global_params))
        for update in intake.updates:
            entry["sites"][update.site]["sent_layers"] = [layer.name for layer in self.layers
                                                          if layer.keys[0] in update.params]

    def secure_groups(self) -> list[list[str]]:
        """One group per federated layer: a layer is averaged over the sites that sent it (FedLP sends some)."""
        return [list(layer.keys) for layer in self.layers[:self.shared]]

    def masked_answer_check(self, round_index: int) -> MetaCheck | None:
        """In the rounds a curve is due, the curve each site sends in the clear beside its keys."""
        if not self._contract.sends_sensitivity(round_index):
            return None
        return lambda site, meta: check_curve(site, meta.get(protocol.SENSITIVITY), self.layers, masked=True)

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Weights]]:
        return {"shared": self.shared}, {"global": self.global_params}

    def restore(self, resumed: Resumed) -> None:
        self.shared, self.global_params = int(resumed.state["shared"]), resumed.params["global"]

    def model_to_save(self) -> Weights:
        return {k: self.global_params[k] for k in prefix_keys(self.layers, self.shared)}

    def finish_run(self) -> bool:
        """Every site evaluates its best-validation model on its held-out split; the federation's summary."""
        results = self._send(protocol.EVALUATE_TASK, self.global_params, self.layers, self.shared, self.job.num_rounds)
        if self.abort_signal.triggered:
            self.stopped("the final evaluation")
            return False
        evaluation = {site_name(r): {**scalar_metrics(r), **self._reported_weight(r)}
                      for r in sorted(results, key=site_name)}
        if len(evaluation) < self.job.min_clients:
            missing = missing_sites(self.site_names(), evaluation)
            self.fail(f"evaluation: only {len(evaluation)} sites answered, the job needs {self.job.min_clients}; no "
                      f"evaluation from {missing}")
            return False
        extra: dict[str, Any] = {}
        if self.job.cross_site_evaluation:
            scored = self._send(protocol.SCORE_GLOBAL_TASK, self.global_params, self.layers, len(self.layers),
                                self.job.num_rounds)
            if self.abort_signal.triggered:
                self.stopped("the cross-site evaluation")
                return False
            extra["cross_site"] = personalised_against_global(
                evaluation, {site_name(r): scalar_metrics(r) for r in scored}, CROSS_SITE_SCORES, self.site_names(),
                self._global_model_parts())
        self.recorder.save_model(self.model_to_save())
        self.recorder.finish("finished", federated_layers=self.shared, evaluation=evaluation,
                             summary=federation_summary(evaluation, weighted=not self.masked), **extra)
        return True

    def _global_model_parts(self) -> str:
        """What the server's whole global model is: the layers federated in the last round, and the rest as the
        server last held them (averaged in an earlier round, e.g. PLayer-FL's round 1, or never: initial)."""
        names = [layer.name for layer in self.layers]
        rest = f"; {', '.join(names[self.shared:])} as the server last held them (averaged in an earlier round, " \
               "or the initial values where never federated)" if self.shared < len(names) else ""
        return f"{', '.join(names[:self.shared])} as federated in the last round{rest}"

    def _reported_weight(self, result: FLModel) -> dict[str, int]:
        """A site's training-set size as it sent it beside its evaluation; with secure_aggregation none is recorded
        (a site's size leaves it only masked, and results.json never holds one per site)."""
        return {} if self.masked else {WEIGHT: int(reported_samples(result))}

    def _layers_message(self, global_params: Weights, layers: list[Layer], shared: int) -> RoundMessage:
        """The first `shared` layers' global values, with the method's name and the number of layers sent."""
        params = {k: global_params[k] for k in prefix_keys(layers, shared)}
        return RoundMessage(params, {protocol.METHOD: self.job.method, protocol.SHARED_LAYERS: shared})

    def _send(self, task: str, global_params: Weights, layers: list[Layer], shared: int,
              round_index: int) -> list[FLModel]:
        """A task after the rounds (evaluate, score the global model) with the first `shared` layers."""
        message = self._layers_message(global_params, layers, shared)
        return self.send(task, message.params, round_index, message.meta)

    def _check(self, global_params: Weights, layers: list[Layer], shared: int, round_index: int) -> UpdateCheck:
        """This round's rule for an update: the shared layers as the method sends them, and a curve when due."""
        partial, wants_curve = self._contract.partial_upload, self._contract.sends_sensitivity(round_index)

        def check(update: SiteUpdate, meta: Mapping[str, Any]) -> None:
            check_layers(update, global_params, layers[:shared], partial=partial)
            if wants_curve:
                check_curve(update.site, meta.get(protocol.SENSITIVITY), layers)
        return check

    def _split(self, curves: Mapping[str, Any], num_samples: Mapping[str, int], layers: list[Layer]) -> dict[str, Any]:
        """Choose p with the method's rule from the sites' curves (if any); returns the record a researcher needs
        to see why."""
        inputs = SplitInputs([layer.name for layer in layers], curves, num_samples, self.job.threshold, self.job.seed,
                             self.job.curve_normalisation, self.job.playerfl_split)
        return SPLIT_RULES[self.job.method](inputs, self.info)

    def job_summary(self) -> dict[str, Any]:
        """Every parameter of the job, then what the workflow derived from them."""
        return {"workflow": "playerfl", **params_to_json(self.job), "model_args": self.model_args,
                "layers": [layer.name for layer in self.layers]}


def check_layers(update: SiteUpdate, global_params: Weights, shared: list[Layer], partial: bool) -> None:
    """The update must hold exactly the shared layers' entries (with `partial`, whole layers among them), valid."""
    allowed = {k for layer in shared for k in layer.keys}
    extra = sorted(set(update.params) - allowed)
    if extra:
        raise UpdateRejected(update.site,
                             f"it sends parameters outside the {len(shared)} federated layers: {extra[:5]}")
    sent = [layer for layer in shared if any(k in update.params for k in layer.keys)] if partial else shared
    expected = {k: global_params[k] for layer in sent for k in layer.keys}
    if expected:
        check_update(update, expected)
    else:  # Local, or FedLP dropping every layer: only the sample count to check
        check_sample_count(update)


def check_curve(site: str, curve: object, layers: list[Layer], masked: bool = False) -> None:
    """A sensitivity curve must name the server's layers in order and hold finite, non-decreasing values; it
    carries the site's training-set size (its weight in the mean), except in a masked job (`masked`), where a curve
    carrying one is refused: a site's size leaves it only inside the masked vector there."""
    names = [layer.name for layer in layers]
    if not isinstance(curve, dict) or curve.get("layers") != names:
        raise UpdateRejected(site, f"its sensitivity curve does not name the model's {len(names)} layers in order")
    values = np.asarray(curve.get("cumulative"), dtype=np.float64)
    if values.shape != (len(names),) or not np.all(np.isfinite(values)) or np.any(np.diff(values) < 0) or values[0] < 0:
        raise UpdateRejected(site, "its sensitivity curve is not a finite, non-negative, non-decreasing sequence")
    samples = curve.get(protocol.CURVE_SAMPLES)
    if masked:
        if samples is not None:
            raise UpdateRejected(site, "its sensitivity curve carries its number of training samples in the clear, "
                                       "which a job with secure_aggregation never lets a site send")
        return
    if not isinstance(samples, int) or isinstance(samples, bool) or samples <= 0:
        raise UpdateRejected(site, f"its sensitivity curve carries {samples!r} as its number of training samples, "
                                   "not a positive integer")


def aggregate_layers(updates: list[SiteUpdate], layers: list[Layer], global_params: Weights) -> Weights:
    """Sample-weighted mean per layer over the sites that sent it, in the order given (the intake's site-name order);
    a layer no site sent keeps its global value."""
    result: Weights = {}
    for layer in layers:
        senders = [SiteUpdate(u.site, {k: u.params[k] for k in layer.keys}, u.num_samples)
                   for u in updates if layer.keys[0] in u.params]
        if senders:
            result.update(aggregate("weighted_mean", senders, reference={k: global_params[k] for k in layer.keys}))
    return result
