"""FedAvg on the reference linear model (ALGORITHMS.md): the federation's smoke test.

Parameters:
    num_rounds     rounds of FedAvg (reference: 5)
    local_steps    full-batch gradient steps per site and round (reference: 5)
    learning_rate  site step size (reference: 0.1)
    aggregation    weighted_mean (FedAvg), median or trimmed_mean
    trim_fraction  share dropped at each end by trimmed_mean
    min_clients    sites that must take part (reference: 3)
    dataset        the dataset key sites map to a local folder in their site_agent.json (default "linear")

Sites need `site-agent demo-data linear --site-index N --out FOLDER` and that folder under "linear".
"""

from __future__ import annotations

import argparse

from nvflare.job_config.api import FedJob

from jobs.common import new_job
from server_app.fedavg import FedAvgController
from site_agent.tasks.linear_regression import LinearRegressionTask

NAME = "fedavg-linear"


def build_job(
    num_rounds: int = 5,
    local_steps: int = 5,
    learning_rate: float = 0.1,
    aggregation: str = "weighted_mean",
    trim_fraction: float = 0.1,
    min_clients: int = 3,
    dataset: str = "linear",
    seed: int = 0,
) -> FedJob:
    job = new_job(NAME, min_clients)
    job.to_server(
        FedAvgController(
            num_rounds=num_rounds,
            model="linear_regression",
            model_args={"in_features": 2},
            aggregation=aggregation,
            trim_fraction=trim_fraction,
            min_clients=min_clients,
            seed=seed,
        )
    )
    job.to_clients(LinearRegressionTask(learning_rate=learning_rate, local_steps=local_steps, dataset=dataset, seed=seed))
    return job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-rounds", type=int, default=5)
    parser.add_argument("--local-steps", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--aggregation", default="weighted_mean", choices=["weighted_mean", "median", "trimmed_mean"])
    parser.add_argument("--trim-fraction", type=float, default=0.1)
    parser.add_argument("--min-clients", type=int, default=3)
    parser.add_argument("--dataset", default="linear")
    parser.add_argument("--seed", type=int, default=0)
