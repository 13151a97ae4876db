"""Federated averaging workflow: broadcast the global model, validate every update, combine with a chosen rule.

With `selection_metric`, the workflow also keeps the best global model by a validation metric the sites report
about the model they received (see `server_app.selection`): each round's entry in results.json records it, an
extra `validate` task scores the final model, and the best model is saved as `best_global_model.pt`. With
`test_metric` as well, a last `test` task sends the best model to every site, which scores it on its held-out test
cases; results.json records it under "test" (selection never sees those cases). With `cross_site_evaluation`,
the selected model and the sites' local models are then scored at every site (`server_app.cross_site`).
"""

from __future__ import annotations

from typing import Any, cast

from nvflare.app_common.abstract.fl_model import FLModel

from fl_contract.job_params import FedAvgJob, job_params
from fl_contract.models import build_model, state_dict_to_numpy
from fl_contract.params import JobParams, params_to_json
from server_app.aggregation import (
    RoundIntake,
    UpdateCheck,
    Weights,
    aggregate,
    matching,
    missing_sites,
    scalar_metrics,
    site_name,
)
from server_app.checkpoint import Resumed
from server_app.cross_site import cross_site_evaluation
from server_app.results import BEST_MODEL_FILE
from server_app.round_workflow import RoundMessage, RoundWorkflow
from server_app.selection import BestModel, site_weighted_mean

SMALL_MODEL_PARAMETERS = 64  # models up to this size have their weights written into results.json every round


class FedAvgController(RoundWorkflow):
    """FedAvg (McMahan et al. 2017) with weighted mean, coordinate-wise median or trimmed mean aggregation.

    An update that fails validation (wrong names/shapes, non-finite values, no samples) is left out of the round
    and the reason is logged with the site's name; the job stops if fewer than `min_clients` valid updates remain.
    A round ends when every site has answered, or `late_site_wait_s` seconds after `min_clients` sites answered;
    a site whose task failed (or that had not answered by then) is listed under "no_result" for the round. The
    round loop itself (resume, abort, intake, outcomes, checkpoint) is `RoundWorkflow`'s.
    """

    def __init__(self, *, kind: str, params: dict[str, Any]):
        super().__init__()
        self.job: FedAvgJob = job_params(kind, params, FedAvgJob)  # type: ignore[type-abstract]  # a protocol
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params = kind, params
        self.rule_options = {"trim_fraction": self.job.trim_fraction} if self.job.aggregation == "trimmed_mean" else {}
        self.model, self.model_args = self.job.model_spec()
        self.selection_metric, self.selection_weight, self.test_metric, self.test_weight = self.job.selection()

    def setup(self) -> None:
        self.global_params: Weights = state_dict_to_numpy(build_model(self.model, **self.model_args))
        self.record_weights = sum(v.size for v in self.global_params.values()) <= SMALL_MODEL_PARAMETERS
        self.best = BestModel(self.selection_metric, self.selection_weight) if self.selection_metric else None

    def round_message(self, round_index: int) -> RoundMessage:
        self.info(f"round {round_index + 1}/{self.job.num_rounds}: sending the global model")
        return RoundMessage(self.global_params)

    def update_check(self, round_index: int) -> UpdateCheck:
        return matching(self.global_params)

    def aggregate(self, round_index: int, intake: RoundIntake, entry: dict[str, Any]) -> None:
        if self.best is not None:
            entry["selection"] = self.best.observe(round_index, self.global_params, intake.metrics)
        if intake.masked is not None:
            self.global_params = intake.masked.applied_to(self.global_params)
        else:
            self.global_params = aggregate(self.job.aggregation, intake.updates, reference=self.global_params,
                                           **self.rule_options)
        if self.record_weights:
            entry["global_weights"] = {k: v.ravel().tolist() for k, v in self.global_params.items()}
        how = "their masked sum (secure aggregation)" if intake.masked is not None else self.job.aggregation
        self.info(f"round {round_index + 1}: aggregated {len(intake.contributors)} updates with {how}")

    def checkpoint_state(self) -> tuple[dict[str, Any], dict[str, Weights]]:
        best = self.best
        params = {"global": self.global_params, **({"best": best.params} if best is not None else {})}
        return {"best": best.summary() if best is not None else None}, params

    def restore(self, resumed: Resumed) -> None:
        self.global_params = resumed.params["global"]
        if self.best is not None and resumed.state.get("best"):
            self.best.restore(resumed.state["best"], resumed.params["best"])

    def model_to_save(self) -> Weights:
        return self.global_params

    def finish_run(self) -> bool:
        """The final model; with selection, the `validate` task on it and the best model, then the `test` task."""
        self.recorder.save_model(self.global_params)
        if self.best is not None:
            self._select_final(self.best)
            if self.abort_signal.triggered:
                self.stopped("the final validation")
                return False
            if self.test_metric:
                self._test_best(self.best, self.test_metric)
                if self.abort_signal.triggered:
                    self.stopped("the final test")
                    return False
        split = self.job.cross_site_split()
        if split:
            self.info(f"cross-site evaluation on the sites' {split} cases")
            self.recorder.record["cross_site"] = cross_site_evaluation(
                self._send_after_rounds, self.best.params if self.best else self.global_params, self.global_params,
                self.weights_encoding, split, self.job.local_models_refusal(), self.site_names(),
                lambda: bool(self.abort_signal.triggered))
            if self.abort_signal.triggered:
                self.stopped("the cross-site evaluation")
                return False
        self.recorder.finish("finished")
        return True

    def _send_after_rounds(self, task_name: str, params: Weights, meta: dict[str, Any]) -> list[FLModel]:
        return self.send(task_name, params, self.job.num_rounds, meta)

    def _select_final(self, best: BestModel) -> None:
        """Score the final model with a `validate` task, then save the best model and record which round it is."""
        results = self.send("validate", self.global_params, self.job.num_rounds)
        metrics = {site_name(r): scalar_metrics(r) for r in sorted(results, key=site_name)}
        final = {"model_round": self.job.num_rounds, "sites": metrics,
                 "no_result": missing_sites(self.site_names(), metrics)}
        if metrics:
            final["selection"] = best.observe(self.job.num_rounds, self.global_params, metrics)
        self.recorder.record["final_validation"] = final
        self.recorder.save_model(best.params, BEST_MODEL_FILE)
        self.recorder.record["best_model"] = {**best.summary(), "file": BEST_MODEL_FILE}
        self.info(f"best global model: {best.metric} {best.value:.4f} after {best.model_round} aggregation round(s)")

    def _test_best(self, best: BestModel, metric: str) -> None:
        """Score the selected model once on the sites' test cases: the final report, unbiased by the selection."""
        results = self.send("test", best.params, int(best.model_round or 0))
        metrics = {site_name(r): scalar_metrics(r) for r in sorted(results, key=site_name)}
        test: dict[str, Any] = {"model_round": best.model_round, "sites": metrics,
                                "no_result": missing_sites(self.site_names(), metrics)}
        if metrics:
            value = site_weighted_mean(metrics, metric, self.test_weight)
            test["federation"] = {"metric": metric, "weight": self.test_weight, "value": value}
            self.info(f"selected model (round {best.model_round}) on the test cases: {metric} {value:.4f}")
        self.recorder.record["test"] = test

    def job_summary(self) -> dict[str, Any]:
        """Every parameter of the job, then what the workflow derived from them."""
        params = cast(JobParams, self.job)  # FedAvgJob is the protocol the kinds' JobParams share
        return {"workflow": "fedavg", **params_to_json(params), "model": self.model, "model_args": self.model_args,
                "selection_metric": self.selection_metric, "selection_weight": self.selection_weight,
                "test_metric": self.test_metric, "test_weight": self.test_weight, "secure_aggregation": self.masked,
                "weights_encoding": self.weights_encoding}
