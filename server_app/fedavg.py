"""Federated averaging workflow: broadcast the global model, validate every update, combine with a chosen rule.

With `selection_metric`, the workflow also keeps the best global model by a validation metric the sites report
about the model they received (see `server_app.selection`): each round's entry in results.json records it, an
extra `validate` task scores the final model, and the best model is saved as `best_global_model.pt`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from fl_contract.models import build_model, state_dict_to_numpy
from server_app.aggregation import RULES, RoundIntake, aggregate, matching, missing_sites, scalar_metrics, site_name, take_updates
from server_app.results import BEST_MODEL_FILE, RunRecorder
from server_app.selection import BestModel, Params

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
        *,
        num_rounds: int,
        model: str,
        model_args: dict | None,
        aggregation: str,
        trim_fraction: float,
        min_clients: int,
        selection_metric: str | None = None,
        selection_weight: str | None = None,
        late_site_wait_s: int = 600,
        seed: int,
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
            intake = self._intake(self._broadcast("train", global_params, round_index), global_params)
            if len(intake.updates) < self.min_clients:
                message = f"round {round_index + 1}: only {len(intake.updates)} valid updates, the job needs {self.min_clients}"
                recorder.finish("failed", error=message)
                self.panic(message)
                return
            entry = {"round": round_index + 1, **intake.record()}
            if best is not None:
                entry["selection"] = best.observe(round_index, global_params, intake.metrics)
            global_params = aggregate(self.aggregation, intake.updates, reference=global_params, **self.rule_options)
            if record_weights:
                entry["global_weights"] = {k: v.ravel().tolist() for k, v in global_params.items()}
            recorder.add_round(entry)
            self.info(f"round {round_index + 1}: aggregated {len(intake.updates)} updates with {self.aggregation}")
        recorder.save_model(global_params)
        if best is not None:
            self._select_final(best, global_params, recorder)
        recorder.finish("finished")

    def _broadcast(self, task_name: str, params: Params, round_index: int) -> list[FLModel]:
        """Send `params` to every site; wait for all, or for `late_site_wait_s` after `min_clients` answered."""
        model = FLModel(params=params, params_type=ParamsType.FULL, current_round=round_index, total_rounds=self.num_rounds)
        return self.broadcast_model(data=model, task_name=task_name, min_responses=self.min_clients,
                                    wait_time_after_min_received=self.late_site_wait_s)

    def _intake(self, results: list[FLModel], global_params: Params) -> RoundIntake:
        """The round's valid updates in site-name order; each rejected site is logged by name."""
        return take_updates(results, self._site_names(), matching(global_params), self.error)

    def _site_names(self) -> list[str]:
        return [client.name for client in self.engine.get_clients()]

    def _select_final(self, best: BestModel, global_params: Params, recorder: RunRecorder) -> None:
        """Score the final model with a `validate` task, then save the best model and record which round it is."""
        results = self._broadcast("validate", global_params, self.num_rounds)
        metrics = {site_name(r): scalar_metrics(r) for r in sorted(results, key=site_name)}
        final = {"model_round": self.num_rounds, "sites": metrics, "no_result": missing_sites(self._site_names(), metrics)}
        if metrics:
            final["selection"] = best.observe(self.num_rounds, global_params, metrics)
        recorder.record["final_validation"] = final
        recorder.save_model(best.params, BEST_MODEL_FILE)
        recorder.record["best_model"] = {**best.summary(), "file": BEST_MODEL_FILE}
        self.info(f"best global model: {best.metric} {best.value:.4f} after {best.model_round} aggregation round(s)")

    def _job_summary(self) -> dict:
        return {"workflow": "fedavg", "model": self.model, "model_args": self.model_args, "num_rounds": self.num_rounds,
                "aggregation": self.aggregation, **self.rule_options, "min_clients": self.min_clients,
                "selection_metric": self.selection_metric, "selection_weight": self.selection_weight, "seed": self.seed}

