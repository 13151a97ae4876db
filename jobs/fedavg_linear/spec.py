"""FedAvg on the reference linear model (docs/algorithms.md#fedavg-reference-run): the federation's smoke test.

Sites need `site-agent demo-data linear --site-index N --out FOLDER` and that folder under the dataset key.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.spec import Apps, FederationParams, JobKind, param
from server_app.aggregation import RULES


@dataclass(frozen=True)
class FedAvgLinearParams(FederationParams):
    num_rounds: int = param(5, "rounds of FedAvg (reference: 5)", low=1)
    local_steps: int = param(5, "full-batch gradient steps per site and round (reference: 5)", low=1)
    learning_rate: float = param(0.1, "site step size (reference: 0.1)", low=0.0)
    aggregation: str = param("weighted_mean", "weighted_mean (FedAvg), median or trimmed_mean", choices=sorted(RULES))
    trim_fraction: float = param(0.1, "share dropped at each end by trimmed_mean", low=0.0, high=0.49)
    min_clients: int = param(3, "sites that must take part (reference: 3)", low=1)
    dataset: str = param("linear", "dataset key sites map to their linear demo folder in site_agent.json")
    seed: int = param(0, "initial weights and site randomness")


def _apps(p: FedAvgLinearParams) -> Apps:
    return Apps(
        controller={"num_rounds": p.num_rounds, "model": "linear_regression", "model_args": {"in_features": 2},
                    "aggregation": p.aggregation, "trim_fraction": p.trim_fraction, "min_clients": p.min_clients,
                    "seed": p.seed},
        site_task={"learning_rate": p.learning_rate, "local_steps": p.local_steps, "dataset": p.dataset, "seed": p.seed},
    )


KIND = JobKind(
    name="fedavg-linear",
    summary="FedAvg on the reference linear model (3 sites with 50/200/500 samples); reproduces the reference weights",
    params=FedAvgLinearParams,
    controller="server_app.fedavg.FedAvgController",
    site_task="site_agent.tasks.linear_regression.LinearRegressionTask",
    apps=_apps,
    dataset_keys=("dataset",),
    demo="jobs.fedavg_linear.demo:DEMOS",
)
