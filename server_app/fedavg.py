"""Federated averaging workflow: broadcast the global model, validate every update, combine with a chosen rule.

With `selection_metric`, the workflow also keeps the best global model by a validation metric the sites report
about the model they received (see `server_app.selection`): each round's entry in results.json records it, an
extra `validate` task scores the final model, and the best model is saved as `best_global_model.pt`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from server_app.aggregation import RULES, SiteUpdate, UpdateRejected, aggregate, check_updates
from server_app.results import BEST_MODEL_FILE, RunRecorder
from server_app.selection import BestModel, Params
from fl_contract.models import build_model, state_dict_to_numpy

SMALL_MODEL_PARAMETERS = 64  # models up to this size have their weights written into results.json every round


class FedAvgController(ModelController):
    """FedAvg (McMahan et al. 2017) with weighted mean, coordinate-wise median or trimmed mean aggregation.

    An update that fails validation (wrong names/shapes, non-finite values, no samples) is left out of the round
    and the reason is logged with the site's name; the job stops if fewer than `min_clients` valid updates remain.
    A round ends when every site has answered, or `late_site_wait_s` seconds after `min_clients` sites answered;
    a site whose task failed (or that had not answered by then) is listed under "no_result" for the round.
    """

    def __init__(
        self,
        num_rounds: int,
        model: str,
        model_args: dict | None = None,
        aggregation: str = "weighted_mean",
        trim_fraction: float = 0.1,
        min_clients: int = 1,
        selection_metric: str | None = None,
        selection_weight: str | None = None,
        late_site_wait_s: int = 600,
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
        self.selection_metric = selection_metric
        self.selection_weight = selection_weight
        self.late_site_wait_s = late_site_wait_s
        self.seed = seed

    def run(self) -> None:
        torch.manual_seed(self.seed)
        global_params = state_dict_to_numpy(build_model(self.model, **self.model_args))
        record_weights = sum(v.size for v in global_params.values()) <= SMALL_MODEL_PARAMETERS
        recorder = RunRecorder(Path(self.get_app_dir()), self._job_summary())
        best = BestModel(self.selection_metric, self.selection_weight) if self.selection_metric else None
        for round_index in range(self.num_rounds):
            self.info(f"round {round_index + 1}/{self.num_rounds}: sending the global model")
            results = self._broadcast("train", global_params, round_index)
            updates, metrics, rejected = self._valid_updates(results, global_params)
            if len(updates) < self.min_clients:
                message = f"round {round_index + 1}: only {len(updates)} valid updates, the job needs {self.min_clients}"
                recorder.finish("failed", error=message)
                self.panic(message)
                return
            entry = {
                "round": round_index + 1,
                "sites": {u.site: {"num_samples": int(u.num_samples), "metrics": metrics[u.site]} for u in updates},
                "rejected": rejected,
                "no_result": self._silent_sites(results),
            }
            if best is not None:
                entry["selection"] = best.observe(round_index, global_params, metrics)
            global_params = aggregate(self.aggregation, updates, reference=global_params, **self.rule_options)
            if record_weights:
                entry["global_weights"] = {k: v.ravel().tolist() for k, v in global_params.items()}
            recorder.add_round(entry)
            self.info(f"round {round_index + 1}: aggregated {len(updates)} updates with {self.aggregation}")
        recorder.save_model(global_params)
        if best is not None:
            self._select_final(best, global_params, recorder)
        recorder.finish("finished")

    def _broadcast(self, task_name: str, params: Params, round_index: int) -> list[FLModel]:
        """Send `params` to every site; wait for all, or for `late_site_wait_s` after `min_clients` answered."""
        model = FLModel(params=params, params_type=ParamsType.FULL, current_round=round_index, total_rounds=self.num_rounds)
        return self.broadcast_model(data=model, task_name=task_name, min_responses=self.min_clients,
                                    wait_time_after_min_received=self.late_site_wait_s)

    def _silent_sites(self, results: list[FLModel]) -> list[str]:
        answered = {r.meta.get("client_name") for r in results}
        return sorted(c.name for c in self.engine.get_clients() if c.name not in answered)

    def _select_final(self, best: BestModel, global_params: Params, recorder: RunRecorder) -> None:
        """Score the final model with a `validate` task, then save the best model and record which round it is."""
        results = self._broadcast("validate", global_params, self.num_rounds)
        metrics = {r.meta.get("client_name", "unknown site"): {k: float(v) for k, v in (r.metrics or {}).items()} for r in results}
        final = {"model_round": self.num_rounds, "sites": metrics, "no_result": self._silent_sites(results)}
        if metrics:
            final["selection"] = best.observe(self.num_rounds, global_params, metrics)
        recorder.record["final_validation"] = final
        recorder.save_model(best.params, BEST_MODEL_FILE)
        recorder.record["best_model"] = {**best.summary(), "file": BEST_MODEL_FILE}
        self.info(f"best global model: {best.metric} {best.value:.4f} after {best.model_round} aggregation round(s)")

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
                "aggregation": self.aggregation, **self.rule_options, "min_clients": self.min_clients,
                "selection_metric": self.selection_metric, "selection_weight": self.selection_weight, "seed": self.seed}

