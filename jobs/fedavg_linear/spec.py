"""FedAvg on the reference linear model (docs/algorithms.md#fedavg-reference-run): the federation's smoke test.

Sites need `site-agent demo-data linear --site-index N --out FOLDER` and that folder under the dataset key.
"""

from __future__ import annotations

from fl_contract.job_params.fedavg_linear import FedAvgLinearParams
from jobs.spec import JobKind

KIND = JobKind(
    name="fedavg-linear",
    summary="FedAvg on the reference linear model (3 sites with 50/200/500 samples); reproduces the reference weights",
    params=FedAvgLinearParams,
    controller="server_app.fedavg.FedAvgController",
    site_task="site_agent.tasks.fedavg_linear.LinearRegressionTask",
    dataset_keys=("dataset",),
)

__all__ = ["KIND", "FedAvgLinearParams"]
