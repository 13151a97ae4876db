"""PLayer-FL on the server: the partial-federation controller, its update checks and its per-layer averaging.

What differs per method is the method's contract (`fl_contract.playerfl.methods`: what is federated, when curves
come, whether a split is chosen) and, for the methods that choose a split, its rule (`server_app.playerfl_split`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from fl_contract.models import build_model
from fl_contract.playerfl import protocol
from fl_contract.playerfl.layers import Layer, model_layers, prefix_keys
from fl_contract.playerfl.methods import get_method
from server_app.aggregation import (
    Params,
    SiteUpdate,
    UpdateCheck,
    UpdateRejected,
    aggregate,
    check_sample_count,
    check_update,
    missing_sites,
    reported_samples,
    scalar_metrics,
    site_name,
    site_outcomes,
    take_updates,
)
from server_app.checkpoint import workflow_checkpoint
from server_app.metrics import WEIGHT, federation_summary
from server_app.playerfl_split import SPLIT_RULES, SplitInputs
from server_app.results import RunRecorder


class PLayerFLController(ModelController):
    """Partial federation: each round averages (sample-weighted) only the first `shared` layers of the sites' models.

    `shared` starts at the method's `initial_shared_layers`; for the methods that choose a split it becomes the p
    their rule chooses (PLayer-FL: from the sites' curves after round 1; PLayer-FL-Random: drawn by seed before
    round 1). The split, the curves, the layers each site sent every round and the sites' held-out scores go into
    results.json.
    """

    def __init__(
        self,
        *,
        num_rounds: int,
        model: str,
        model_args: dict[str, Any] | None,
        method: str,
        threshold: float,
        curve_normalisation: str,
        playerfl_split: int,
        min_clients: int,
        seed: int,
    ):
        super().__init__(persistor_id="")
        self._contract = get_method(method)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.num_rounds = num_rounds
        self.model = model
        self.model_args = model_args or {}
        self.method = method
        self.threshold = threshold
        self.curve_normalisation = curve_normalisation
        self.playerfl_split = playerfl_split
        self.min_clients = min_clients
        self.seed = seed

    def run(self) -> None:
        torch.manual_seed(self.seed)
        net = build_model(self.model, **self.model_args)
        layers = model_layers(net)
        state = net.state_dict()
        global_params = {k: state[k].numpy().copy() for layer in layers for k in layer.keys}
        shared = self._contract.initial_shared_layers(len(layers))
        recorder = RunRecorder(Path(self.get_app_dir()), self._job_summary(layers))
        checkpoint = workflow_checkpoint(self, self._job_summary(layers))
        start, up_front = 0, None
        resumed = checkpoint.load()
        if resumed is not None:
            start, shared, global_params = resumed.completed_rounds, int(resumed.state["shared"]), resumed.params["global"]
            recorder.resume(resumed.state["rounds"], start)
            self.info(f"resuming after round {start} from {checkpoint.folder}")
        elif self._contract.split_before_training:
            up_front = self._split({}, {}, layers)
            shared = up_front["federated_layers"]
        for round_index in range(start, self.num_rounds):
            self.info(f"round {round_index + 1}/{self.num_rounds}: sending the first {shared} of {len(layers)} layers")
            results = self._send(protocol.TRAIN_TASK, global_params, layers, shared, round_index)
            if self.abort_signal.triggered:
                return self._stop(recorder, "aborted", f"aborted during round {round_index + 1}",
                                  {k: global_params[k] for k in prefix_keys(layers, shared)})
            check = self._check(global_params, layers, shared, round_index)
            intake = take_updates(results, self._site_names(), check, self.error)
            outcomes = site_outcomes(intake, self._failed_sites())
            if len(intake.updates) < self.min_clients:
                failed_round = {"round": round_index + 1, **intake.record(), "outcomes": outcomes}
                return self._fail(recorder, f"round {round_index + 1}: only {len(intake.updates)} valid updates, the job "
                                            f"needs {self.min_clients}; " + "; ".join(f"{s}: {o}" for s, o in outcomes.items()),
                                  failed_round=failed_round)
            entry: dict[str, Any] = {"round": round_index + 1, **intake.record(), "outcomes": outcomes}
            if round_index == 0 and up_front is not None:
                entry["split"] = up_front
            if self._contract.chooses_split(round_index):
                curves = {site: meta[protocol.SENSITIVITY] for site, meta in intake.meta.items() if protocol.SENSITIVITY in meta}
                entry["split"] = self._split(curves, {u.site: u.num_samples for u in intake.updates}, layers)
                shared = entry["split"]["federated_layers"]
            global_params.update(aggregate_layers(intake.updates, layers[:shared], global_params))
            for update in intake.updates:
                entry["sites"][update.site]["sent_layers"] = [layer.name for layer in layers if layer.keys[0] in update.params]
            recorder.add_round(entry)
            checkpoint.save(round_index + 1, {"rounds": recorder.record["rounds"], "shared": shared}, {"global": global_params})
        results = self._send(protocol.EVALUATE_TASK, global_params, layers, shared, self.num_rounds)
        if self.abort_signal.triggered:
            return self._stop(recorder, "aborted", "aborted during the final evaluation",
                              {k: global_params[k] for k in prefix_keys(layers, shared)})
        evaluation = {site_name(r): {**scalar_metrics(r), WEIGHT: int(reported_samples(r))}
                      for r in sorted(results, key=site_name)}
        if len(evaluation) < self.min_clients:
            missing = missing_sites(self._site_names(), evaluation)
            return self._fail(recorder, f"evaluation: only {len(evaluation)} sites answered, the job needs "
                                        f"{self.min_clients}; no evaluation from {missing}")
        recorder.save_model({k: global_params[k] for k in prefix_keys(layers, shared)})
        recorder.finish("finished", federated_layers=shared, evaluation=evaluation, summary=federation_summary(evaluation))
        checkpoint.clear()

    def _send(self, task: str, global_params: Params, layers: list[Layer], shared: int, round_index: int) -> list[FLModel]:
        """Send the first `shared` layers' global values with the method's name to every site; wait for all."""
        params = {k: global_params[k] for k in prefix_keys(layers, shared)}
        meta = {protocol.METHOD: self.method, protocol.SHARED_LAYERS: shared}
        message = FLModel(params=params, params_type=ParamsType.FULL, current_round=round_index,
                          total_rounds=self.num_rounds, meta=meta)
        results: list[FLModel] = self.send_model_and_wait(task_name=task, data=message)
        return results

    def _site_names(self) -> list[str]:
        return [client.name for client in self.engine.get_clients()]

    def _check(self, global_params: Params, layers: list[Layer], shared: int, round_index: int) -> UpdateCheck:
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
        inputs = SplitInputs([layer.name for layer in layers], curves, num_samples, self.threshold, self.seed,
                             self.curve_normalisation, self.playerfl_split)
        return SPLIT_RULES[self.method](inputs, self.info)

    def _fail(self, recorder: RunRecorder, message: str, **extra: Any) -> None:
        """Stop the job, naming why; the completed rounds stay in results.json and in the checkpoint for a resume."""
        recorder.finish("failed", error=message, **extra)
        self.panic(message)

    def _stop(self, recorder: RunRecorder, status: str, reason: str, federated: Params) -> None:
        """End early, keeping the completed rounds and the last federated layers; the checkpoint stays for a resume."""
        recorder.save_model(federated)
        recorder.finish(status, error=reason)
        self.info(f"job {status}: {reason}; {len(recorder.record['rounds'])} completed rounds kept")

    def _failed_sites(self) -> set[str]:
        """Sites whose task returned an error this round (FLARE's ModelController keeps them for its own tolerance)."""
        return set(getattr(self, "_current_failed_clients", set()))

    def _job_summary(self, layers: list[Layer]) -> dict[str, Any]:
        return {"workflow": "playerfl", "method": self.method, "model": self.model, "model_args": self.model_args,
                "num_rounds": self.num_rounds, "threshold": self.threshold,
                "curve_normalisation": self.curve_normalisation, "playerfl_split": self.playerfl_split, "seed": self.seed,
                "layers": [layer.name for layer in layers]}


def check_layers(update: SiteUpdate, global_params: Params, shared: list[Layer], partial: bool) -> None:
    """The update must hold exactly the shared layers' entries (with `partial`, whole layers among them), valid."""
    allowed = {k for layer in shared for k in layer.keys}
    extra = sorted(set(update.params) - allowed)
    if extra:
        raise UpdateRejected(update.site, f"it sends parameters outside the {len(shared)} federated layers: {extra[:5]}")
    sent = [layer for layer in shared if any(k in update.params for k in layer.keys)] if partial else shared
    expected = {k: global_params[k] for layer in sent for k in layer.keys}
    if expected:
        check_update(update, expected)
    else:  # Local, or FedLP dropping every layer: only the sample count to check
        check_sample_count(update)


def check_curve(site: str, curve: object, layers: list[Layer]) -> None:
    """A sensitivity curve must name the server's layers in order and hold finite, non-decreasing values."""
    names = [layer.name for layer in layers]
    if not isinstance(curve, dict) or curve.get("layers") != names:
        raise UpdateRejected(site, f"its sensitivity curve does not name the model's {len(names)} layers in order")
    values = np.asarray(curve.get("cumulative"), dtype=np.float64)
    if values.shape != (len(names),) or not np.all(np.isfinite(values)) or np.any(np.diff(values) < 0) or values[0] < 0:
        raise UpdateRejected(site, "its sensitivity curve is not a finite, non-negative, non-decreasing sequence")


def aggregate_layers(updates: list[SiteUpdate], layers: list[Layer], global_params: Params) -> Params:
    """Sample-weighted mean per layer over the sites that sent it, in the order given (the intake's site-name order);
    a layer no site sent keeps its global value."""
    result: Params = {}
    for layer in layers:
        senders = [SiteUpdate(u.site, {k: u.params[k] for k in layer.keys}, u.num_samples)
                   for u in updates if layer.keys[0] in u.params]
        if senders:
            result.update(aggregate("weighted_mean", senders, reference={k: global_params[k] for k in layer.keys}))
    return result
