"""fedavg-linear's parameters: FedAvg on the reference linear model (docs/algorithms.md), the federation's
smoke test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.aggregation_rules import AGGREGATION_RULES
from fl_contract.masked_weights import SecureWeightsParams
from fl_contract.params import RoundParams, param
from fl_contract.weights_encoding import WeightsEncodingParams


@dataclass(frozen=True)
class FedAvgLinearParams(WeightsEncodingParams, SecureWeightsParams, RoundParams):
    num_rounds: int = param(5, "rounds of FedAvg (reference: 5)", low=1)
    local_steps: int = param(5, "full-batch gradient steps per site and round (reference: 5)", low=1)
    learning_rate: float = param(0.1, "site step size (reference: 0.1)", low=0.0)
    aggregation: str = param("weighted_mean", "weighted_mean (FedAvg), median or trimmed_mean",
                             choices=AGGREGATION_RULES)
    trim_fraction: float = param(0.1, "share dropped at each end by trimmed_mean", low=0.0, high=0.49)
    min_clients: int = param(3, "sites that must take part (reference: 3)", low=1)
    dataset: str = param("linear", "dataset key sites map to their linear demo folder in site_agent.json")
    seed: int = param(0, "initial weights and site randomness")

    def model_spec(self) -> tuple[str, dict[str, Any]]:
        """The network (fl_contract.models name and arguments) the FedAvg workflow averages."""
        return "linear_regression", {"in_features": 2}

    def selection(self) -> tuple[str | None, str | None, str | None, str | None]:
        """(selection metric, its weight, test metric, its weight): none; the reference run keeps its last model."""
        return None, None, None, None

    def cross_site_split(self) -> str | None:
        """No cross-site evaluation: the reference model has no held-out cases to score."""
        return None

    def local_models_refusal(self) -> str:
        return "the reference job has no cross-site evaluation"
