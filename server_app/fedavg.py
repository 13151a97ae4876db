"""Federated averaging workflow: broadcast the global model, validate every update, combine with a chosen rule.

With `selection_metric`, the workflow also keeps the best global model by a validation metric the sites report
about the model they received (see `server_app.selection`): each round's entry in results.json records it, an
extra `validate` task scores the final model, and the best model is saved as `best_global_model.pt`. With
`test_metric` as well, a last `test` task sends the best model to every site, which scores it on its held-out test
cases; results.json records it under "test" (selection never sees those cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType
from nvflare.app_common.workflows.model_controller import ModelController

from fl_contract.models import build_model, state_dict_to_numpy
from server_app.aggregation import (
    RULES,
    RoundIntake,
    aggregate,
    matching,
    missing_sites,
    scalar_metrics,
    site_name,
    site_outcomes,
    take_updates,
)
from server_app.checkpoint import workflow_checkpoint
from server_app.results import BEST_MODEL_FILE, RunRecorder
from server_app.selection import BestModel, Params, site_weighted_mean

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
        model_args: dict[str, Any] | None,
        aggregation: str,
        trim_fraction: float,
        min_clients: int,
        selection_metric: str | None = None,
        selection_weight: str | None = None,
        test_metric: str | None = None,
        test_weight: str | None = None,
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
        self.test_metric = test_metric
        self.test_weight = test_weight
        self.late_site_wait_s = late_site_wait_s
        self.seed = seed

    def run(self) -> None:
        torch.manual_seed(self.seed)
        global_params = state_dict_to_numpy(build_model(self.model, **self.model_args))
        record_weights = sum(v.size for v in global_params.values()) <= SMALL_MODEL_PARAMETERS
        recorder = RunRecorder(Path(self.get_app_dir()), self._job_summary())
        best = BestModel(self.selection_metric, self.selection_weight) if self.selection_metric else None
        checkpoint = workflow_checkpoint(self, self._job_summary())
        start = 0
        resumed = checkpoint.load()
        if resumed is not None:
            start, global_params = resumed.completed_rounds, resumed.params["global"]
            recorder.resume(resumed.state["rounds"], start)
            if best is not None and resumed.state.get("best"):
                best.restore(resumed.state["best"], resumed.params["best"])
            self.info(f"resuming after round {start}: {len(resumed.state['rounds'])} completed rounds from {checkpoint.folder}")
        for round_index in range(start, self.num_rounds):
            self.info(f"round {round_index + 1}/{self.num_rounds}: sending the global model")
            results = self._broadcast("train", global_params, round_index)
            if self.abort_signal.triggered:
                return self._stop(recorder, global_params, "aborted", f"aborted during round {round_index + 1}")
            intake = self._intake(results, global_params)
            if len(intake.updates) < self.min_clients:
                failed_round = {"round": round_index + 1, **intake.record(),
                                "outcomes": site_outcomes(intake, self._failed_sites())}
                message = (f"round {round_index + 1}: only {len(intake.updates)} valid updates, the job needs "
                           f"{self.min_clients}; " + "; ".join(f"{s}: {o}" for s, o in failed_round["outcomes"].items()))
                self._stop(recorder, global_params, "failed", message, failed_round=failed_round)
                self.panic(message)
                return
            entry = {"round": round_index + 1, **intake.record(), "outcomes": site_outcomes(intake, self._failed_sites())}
            if best is not None:
                entry["selection"] = best.observe(round_index, global_params, intake.metrics)
            global_params = aggregate(self.aggregation, intake.updates, reference=global_params, **self.rule_options)
            if record_weights:
                entry["global_weights"] = {k: v.ravel().tolist() for k, v in global_params.items()}
            recorder.add_round(entry)
            checkpoint.save(round_index + 1, {"rounds": recorder.record["rounds"], "best": best.summary() if best else None},
                            {"global": global_params, **({"best": best.params} if best is not None else {})})
            self.info(f"round {round_index + 1}: aggregated {len(intake.updates)} updates with {self.aggregation}")
        recorder.save_model(global_params)
        if best is not None:
            self._select_final(best, global_params, recorder)
            if self.abort_signal.triggered:
                return self._stop(recorder, global_params, "aborted", "aborted during the final validation")
            if self.test_metric:
                self._test_best(best, recorder, self.test_metric)
                if self.abort_signal.triggered:
                    return self._stop(recorder, global_params, "aborted", "aborted during the final test")
        recorder.finish("finished")
        checkpoint.clear()

    def _failed_sites(self) -> set[str]:
        """Sites whose task returned an error this round (FLARE's ModelController keeps them for its own tolerance)."""
        return set(getattr(self, "_current_failed_clients", set()))

    def _stop(self, recorder: RunRecorder, global_params: Params, status: str, reason: str, **extra: Any) -> None:
        """End early with the completed rounds and the last global model kept; the checkpoint stays for a resume."""
        recorder.save_model(global_params)
        recorder.finish(status, error=reason, **extra)
        self.info(f"job {status}: {reason}; {len(recorder.record['rounds'])} completed rounds kept")

    def _broadcast(self, task_name: str, params: Params, round_index: int) -> list[FLModel]:
        """Send `params` to every site; wait for all, or for `late_site_wait_s` after `min_clients` answered."""
        model = FLModel(params=params, params_type=ParamsType.FULL, current_round=round_index, total_rounds=self.num_rounds)
        results = self.broadcast_model(data=model, task_name=task_name, min_responses=self.min_clients,
                                       wait_time_after_min_received=self.late_site_wait_s)
        return cast(list[FLModel], results)  # FLARE is untyped; broadcast_model returns List[FLModel]

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

    def _test_best(self, best: BestModel, recorder: RunRecorder, metric: str) -> None:
        """Score the selected model once on the sites' test cases: the final report, unbiased by the selection."""
        results = self._broadcast("test", best.params, int(best.model_round or 0))
        metrics = {site_name(r): scalar_metrics(r) for r in sorted(results, key=site_name)}
        test: dict[str, Any] = {"model_round": best.model_round, "sites": metrics,
                                "no_result": missing_sites(self._site_names(), metrics)}
        if metrics:
            value = site_weighted_mean(metrics, metric, self.test_weight)
            test["federation"] = {"metric": metric, "weight": self.test_weight, "value": value}
            self.info(f"selected model (round {best.model_round}) on the test cases: {metric} {value:.4f}")
        recorder.record["test"] = test

    def _job_summary(self) -> dict[str, Any]:
        return {"workflow": "fedavg", "model": self.model, "model_args": self.model_args, "num_rounds": self.num_rounds,
                "aggregation": self.aggregation, **self.rule_options, "min_clients": self.min_clients,
                "selection_metric": self.selection_metric, "selection_weight": self.selection_weight,
                "test_metric": self.test_metric, "test_weight": self.test_weight, "seed": self.seed}

