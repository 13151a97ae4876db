"""Best-global-model selection from the validation metrics sites report about the global model they received.

A site scores the global model it receives before training on it, so the metrics arriving in round r (0-based)
describe the model after r aggregations ("model round" r; 0 is the initial model). The final model is scored by
an extra `validate` task after the last round.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server_app.aggregation.updates import Weights


def site_weighted_mean(metrics: Mapping[str, Mapping[str, float]], metric: str, weight: str | None = None) -> float:
    """Mean of `metric` over sites, weighted by each site's `weight` metric (equal weights when None)."""
    missing = sorted(
        site for site, values in metrics.items() if metric not in values or (weight and weight not in values)
    )
    if missing:
        raise ValueError(f"sites {missing} did not report {metric!r}{f' and {weight!r}' if weight else ''}; "
                         "is the job's selection_metric one of the metrics its site task sends?")
    if not metrics:
        raise ValueError(f"no site reported {metric!r}")
    values = np.array([metrics[s][metric] for s in sorted(metrics)], dtype=np.float64)
    weights = np.array([metrics[s][weight] if weight else 1.0 for s in sorted(metrics)], dtype=np.float64)
    if weights.sum() <= 0:
        raise ValueError(f"the sites' {weight!r} values sum to {weights.sum()}; they must be positive")
    return float(weights @ values / weights.sum())


@dataclass
class BestModel:
    """Keeps the global model with the highest site-weighted `metric` seen so far (the earliest on ties)."""

    metric: str
    weight: str | None = None
    value: float = -np.inf
    model_round: int | None = None
    params: Weights = field(default_factory=dict)

    def observe(self, model_round: int, params: Weights, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
        """Score the model sent in `model_round`; returns the record for results.json."""
        value = site_weighted_mean(metrics, self.metric, self.weight)
        if value > self.value:
            self.value, self.model_round, self.params = value, model_round, params
        return {"metric": self.metric, "value": value, "model_round": model_round}

    def restore(self, summary: Mapping[str, Any], params: Weights) -> None:
        """Take back the best model a checkpoint recorded (`summary()` and its parameters)."""
        self.value, self.model_round, self.params = float(summary["value"]), summary["model_round"], dict(params)

    def summary(self) -> dict[str, Any]:
        return {"metric": self.metric, "weight": self.weight, "value": self.value, "model_round": self.model_round}
