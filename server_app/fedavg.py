"""Federated averaging workflow: broadcast the global model, validate every update, combine with a chosen rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from server_app.aggregation import RULES, SiteUpdate, UpdateRejected, aggregate, check_updates
from server_app.results import RunRecorder
from site_agent.models import build_model, state_dict_to_numpy

SMALL_MODEL_PARAMETERS = 64  # models up to this size have their weights written into results.json every round


class FedAvgController(ModelController):
    """FedAvg (McMahan et al. 2017) with weighted mean, coordinate-wise median or trimmed mean aggregation.

    An update that fails validation (wrong names/shapes, non-finite values, no samples) is left out of the round
    and the reason is logged with the site's name; the job stops if fewer than `min_clients` valid updates remain.
    """

    def __init__(
        self,
        num_rounds: int,
        model: str,
        model_args: dict | None = None,
        aggregation: str = "weighted_mean",
        trim_fraction: float = 0.1,
        min_clients: int = 1,
        seed: int = 0,
    ):
        super().__init__(persistor_id="")
        if aggregation not in RULES:
            raise ValueError(f"unknown aggregation {aggregation!r}; choose one of {sorted(RULES)}")
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.num_rounds = num_rounds
        self.model = model
        self.model_args = model_args or {}
        self.aggregation = aggregation
        self.trim_fraction = trim_fraction
        self.rule_options = {"trim_fraction": trim_fraction} if aggregation == "trimmed_mean" else {}
        self.min_clients = min_clients
        self.seed = seed

    def run(self) -> None:
        torch.manual_seed(self.seed)
        global_params = state_dict_to_numpy(build_model(self.model, **self.model_args))
        record_weights = sum(v.size for v in global_params.values()) <= SMALL_MODEL_PARAMETERS
        recorder = RunRecorder(Path(self.get_app_dir()), self._job_summary())
        for round_index in range(self.num_rounds):
            self.info(f"round {round_index + 1}/{self.num_rounds}: sending the global model")
            results = self.send_model_and_wait(
                data=FLModel(params=global_params, params_type=ParamsType.FULL, current_round=round_index, total_rounds=self.num_rounds)
            )
            updates, metrics, rejected = self._valid_updates(results, global_params)
            if len(updates) < self.min_clients:
                message = f"round {round_index + 1}: only {len(updates)} valid updates, the job needs {self.min_clients}"
                recorder.finish("failed", error=message)
                self.panic(message)
                return
            global_params = aggregate(self.aggregation, updates, reference=global_params, **self.rule_options)
            entry = {
                "round": round_index + 1,
                "sites": {u.site: {"num_samples": int(u.num_samples), "metrics": metrics[u.site]} for u in updates},
                "rejected": rejected,
            }
            if record_weights:
                entry["global_weights"] = {k: v.ravel().tolist() for k, v in global_params.items()}
            recorder.add_round(entry)
            self.info(f"round {round_index + 1}: aggregated {len(updates)} updates with {self.aggregation}")
        recorder.save_model(global_params)
        recorder.finish("finished")

    def _valid_updates(
        self, results: list[FLModel], global_params: dict[str, np.ndarray]
    ) -> tuple[list[SiteUpdate], dict[str, dict[str, float]], dict[str, str]]:
        """The updates that pass validation, every valid site's metrics, and the reason for each rejected site."""
        updates, metrics, rejected = [], {}, {}
        for result in results:
            site = result.meta.get("client_name", "unknown site")
            update = SiteUpdate(site, result.params or {}, result.meta.get(FLMetaKey.NUM_STEPS_CURRENT_ROUND, 0))
            try:
                check_updates([update], global_params)
            except UpdateRejected as exc:
                self.error(str(exc))
                rejected[site] = exc.reason
                continue
            updates.append(update)
            metrics[site] = {k: float(v) for k, v in (result.metrics or {}).items()}
        return updates, metrics, rejected

    def _job_summary(self) -> dict:
        return {"workflow": "fedavg", "model": self.model, "model_args": self.model_args, "num_rounds": self.num_rounds,
                "aggregation": self.aggregation, **self.rule_options, "seed": self.seed}

