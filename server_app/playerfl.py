"""PLayer-FL on the server: the split rule (plain functions) and the partial-federation controller.

Split rule: combine the sites' sensitivity curves and choose how many leading layers to federate.
The paper compares the relative sensitivity of consecutive layers with a threshold t but publishes neither t nor
how sites are combined. Ours (ALGORITHMS.md): the sample-weighted mean F of the sites' cumulative curves,
r_l = F_l / F_{l-1}, and p = (first l with r_l > t) - 1 layers federated (1-based l >= 2); the last layer always
stays local, so p <= L - 1, and p >= 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pathlib import Path

import numpy as np
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from server_app.aggregation import Params, SiteUpdate, UpdateRejected, aggregate, check_updates
from server_app.metrics import WEIGHT, federation_summary
from server_app.results import RunRecorder
from fl_contract.models import build_model
from fl_contract.playerfl import protocol
from fl_contract.playerfl.layers import Layer, model_layers, prefix_keys

DEFAULT_THRESHOLD = 1.5
THRESHOLD_GRID = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0)


def combine_curves(curves: Mapping[str, Sequence[float]], num_samples: Mapping[str, int]) -> np.ndarray:
    """Sample-weighted mean of the sites' cumulative curves (all of the same length)."""
    if not curves:
        raise ValueError("no sensitivity curves to combine")
    lengths = {site: len(curve) for site, curve in curves.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"sites sent curves of different lengths {lengths}: they do not run the same model")
    sites = sorted(curves)
    weights = np.array([num_samples[s] for s in sites], dtype=np.float64)
    stacked = np.array([curves[s] for s in sites], dtype=np.float64)
    return weights @ stacked / weights.sum()


def sensitivity_ratios(curve: Sequence[float]) -> np.ndarray:
    """r_l = F_l / F_{l-1} for l = 2..L (index 0 is r_2); a step from F = 0 to F > 0 counts as infinite."""
    f = np.asarray(curve, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = f[1:] / f[:-1]
    ratios[(f[:-1] == 0) & (f[1:] == 0)] = 1.0
    return ratios


def choose_split(curve: Sequence[float], threshold: float) -> int:
    """Number p of leading layers to federate: stop before the first layer whose ratio exceeds `threshold`."""
    if len(curve) < 2:
        raise ValueError(f"a split needs at least 2 layers, the curve has {len(curve)}")
    if threshold <= 1.0:
        raise ValueError(f"threshold t must exceed 1 (cumulative curves never decrease), got {threshold}")
    jumps = np.flatnonzero(sensitivity_ratios(curve) > threshold)
    first_jump = int(jumps[0]) + 2 if jumps.size else len(curve)
    return min(first_jump - 1, len(curve) - 1)


def split_over_thresholds(curve: Sequence[float], thresholds: Sequence[float]) -> dict[float, int]:
    """p for each t: logged with the chosen split so a researcher sees how stable it is."""
    return {float(t): choose_split(curve, t) for t in thresholds}


class PLayerFLController(ModelController):
    """Partial federation: each round averages (sample-weighted) only the first `shared` layers of the sites' models.

    `shared` depends on the method (protocol.initial_shared_layers); for PLayer-FL it becomes the split p chosen
    after round 1 from the sites' curves (PLayer-FL-Random: p uniform in 1..L-1 by seed). The split, the curves,
    the layers each site sent every round and the sites' held-out scores go into results.json.
    """

    def __init__(
        self,
        num_rounds: int,
        model: str,
        model_args: dict | None = None,
        method: str = "playerfl",
        threshold: float = DEFAULT_THRESHOLD,
        min_clients: int = 1,
        seed: int = 0,
    ):
        super().__init__(persistor_id="")
        protocol.check_method(method)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.num_rounds = num_rounds
        self.model = model
        self.model_args = model_args or {}
        self.method = method
        self.threshold = threshold
        self.min_clients = min_clients
        self.seed = seed

    def run(self) -> None:
        torch.manual_seed(self.seed)
        net = build_model(self.model, **self.model_args)
        layers = model_layers(net)
        state = net.state_dict()
        global_params = {k: state[k].numpy().copy() for layer in layers for k in layer.keys}
        shared = protocol.initial_shared_layers(self.method, len(layers))
        recorder = RunRecorder(Path(self.get_app_dir()), self._job_summary(layers))
        for round_index in range(self.num_rounds):
            self.info(f"round {round_index + 1}/{self.num_rounds}: sending the first {shared} of {len(layers)} layers")
            results = self.send_model_and_wait(task_name=protocol.TRAIN_TASK, data=self._message(global_params, layers, shared, round_index))
            updates, metrics, rejected = self._valid_updates(results, global_params, layers, shared, round_index)
            if len(updates) < self.min_clients:
                return self._fail(recorder, f"round {round_index + 1}: only {len(updates)} valid updates, the job needs {self.min_clients}")
            entry: dict = {"round": round_index + 1, "rejected": rejected}
            if round_index == 0 and self.method in protocol.SPLIT_METHODS:
                entry["split"] = self._split(results, updates, layers)
                shared = entry["split"]["federated_layers"]
            global_params.update(aggregate_layers(updates, layers[:shared], global_params))
            entry["sites"] = {u.site: {"num_samples": int(u.num_samples), "metrics": metrics[u.site],
                                       "sent_layers": [l.name for l in layers if l.keys and l.keys[0] in u.params]} for u in updates}
            recorder.add_round(entry)
        results = self.send_model_and_wait(task_name=protocol.EVALUATE_TASK, data=self._message(global_params, layers, shared, self.num_rounds))
        evaluation = {r.meta.get("client_name", "unknown site"): {**{k: float(v) for k, v in (r.metrics or {}).items()},
                                                                  WEIGHT: int(r.meta.get(FLMetaKey.NUM_STEPS_CURRENT_ROUND, 0))} for r in results}
        if len(evaluation) < self.min_clients:
            return self._fail(recorder, f"evaluation: only {len(evaluation)} sites answered, the job needs {self.min_clients}")
        recorder.save_model({k: global_params[k] for k in prefix_keys(layers, shared)})
        recorder.finish("finished", federated_layers=shared, evaluation=evaluation, summary=federation_summary(evaluation))

    def _message(self, global_params: Params, layers: list[Layer], shared: int, round_index: int) -> FLModel:
        params = {k: global_params[k] for k in prefix_keys(layers, shared)}
        meta = {protocol.METHOD: self.method, protocol.SHARED_LAYERS: shared}
        return FLModel(params=params, params_type=ParamsType.FULL, current_round=round_index, total_rounds=self.num_rounds, meta=meta)

    def _valid_updates(self, results: list[FLModel], global_params: Params, layers: list[Layer], shared: int,
                       round_index: int) -> tuple[list[SiteUpdate], dict[str, dict[str, float]], dict[str, str]]:
        """The updates that pass validation, every valid site's metrics, and the reason for each rejected site."""
        updates, metrics, rejected = [], {}, {}
        for result in sorted(results, key=lambda r: r.meta.get("client_name", "")):  # arrival order must not change sums
            update = SiteUpdate(result.meta.get("client_name", "unknown site"), result.params or {},
                                result.meta.get(FLMetaKey.NUM_STEPS_CURRENT_ROUND, 0))
            try:
                check_layers(update, global_params, layers[:shared], partial=self.method == "fedlp")
                if round_index == 0 and self.method == "playerfl":
                    check_curve(update.site, result.meta.get(protocol.SENSITIVITY), layers)
            except UpdateRejected as exc:
                self.error(str(exc))
                rejected[update.site] = exc.reason
                continue
            updates.append(update)
            metrics[update.site] = {k: float(v) for k, v in (result.metrics or {}).items()}
        return updates, metrics, rejected

    def _split(self, results: list[FLModel], updates: list[SiteUpdate], layers: list[Layer]) -> dict:
        """Choose p and return the record a researcher needs to see why (curves, ratios, p over a grid of t)."""
        names = [layer.name for layer in layers]
        if self.method == "playerfl_random":
            p = int(np.random.default_rng(self.seed).integers(1, len(layers)))
            self.info(f"PLayer-FL-Random: federating the first {p} layers ({names[:p]})")
            return {"rule": "random", "layers": names, "federated_layers": p}
        valid = {u.site: u.num_samples for u in updates}
        curves = {r.meta["client_name"]: r.meta[protocol.SENSITIVITY] for r in results if r.meta.get("client_name") in valid}
        mean = combine_curves({s: c["cumulative"] for s, c in curves.items()}, valid)
        p = choose_split(mean, self.threshold)
        stability = split_over_thresholds(mean, THRESHOLD_GRID)
        self.info(f"PLayer-FL split: federating the first {p} layers ({names[:p]}), t={self.threshold}; "
                  f"mean curve {np.round(mean, 6).tolist()}; p over t: {stability}")
        ratios = [float(r) if np.isfinite(r) else None for r in sensitivity_ratios(mean)]
        return {"rule": "threshold", "threshold": self.threshold, "layers": names, "federated_layers": p,
                "mean_curve": mean.tolist(), "ratios": ratios, "split_over_thresholds": {str(t): v for t, v in stability.items()},
                "site_curves": {s: c["cumulative"] for s, c in curves.items()},
                "site_importance": {s: c["importance"] for s, c in curves.items()}}

    def _fail(self, recorder: RunRecorder, message: str) -> None:
        recorder.finish("failed", error=message)
        self.panic(message)

    def _job_summary(self, layers: list[Layer]) -> dict:
        return {"workflow": "playerfl", "method": self.method, "model": self.model, "model_args": self.model_args,
                "num_rounds": self.num_rounds, "threshold": self.threshold, "seed": self.seed,
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
        check_updates([update], expected)
    elif not isinstance(update.num_samples, (int, np.integer)) or update.num_samples <= 0:
        raise UpdateRejected(update.site, f"number of training samples must be a positive integer, got {update.num_samples!r}")


def check_curve(site: str, curve: object, layers: list[Layer]) -> None:
    """A sensitivity curve must name the server's layers in order and hold finite, non-decreasing values."""
    names = [layer.name for layer in layers]
    if not isinstance(curve, dict) or curve.get("layers") != names:
        raise UpdateRejected(site, f"its sensitivity curve does not name the model's {len(names)} layers in order")
    values = np.asarray(curve.get("cumulative"), dtype=np.float64)
    if values.shape != (len(names),) or not np.all(np.isfinite(values)) or np.any(np.diff(values) < 0) or values[0] < 0:
        raise UpdateRejected(site, "its sensitivity curve is not a finite, non-negative, non-decreasing sequence")


def aggregate_layers(updates: list[SiteUpdate], layers: list[Layer], global_params: Params) -> Params:
    """Sample-weighted mean per layer over the sites that sent it; a layer no site sent keeps its global value."""
    result: Params = {}
    for layer in layers:
        senders = [SiteUpdate(u.site, {k: u.params[k] for k in layer.keys}, u.num_samples) for u in updates if layer.keys[0] in u.params]
        if senders:
            result.update(aggregate("weighted_mean", senders, reference={k: global_params[k] for k in layer.keys}))
    return result
