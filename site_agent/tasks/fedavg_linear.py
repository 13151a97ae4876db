"""Site side of the FedAvg reference job: full-batch gradient steps on y = X w from the global w."""

from __future__ import annotations

from typing import Any

import torch
from nvflare.apis.fl_constant import FLMetaKey
from nvflare.app_common.abstract.fl_model import FLModel, ParamsType

from fl_contract.job_params import FedAvgLinearParams, job_params
from fl_contract.models import build_model, load_numpy_params, state_dict_to_numpy
from site_agent.data.demo.linear_demo import load_linear_site
from site_agent.tasks.executor import SiteContext, TaskExecutor


class LinearRegressionTask(TaskExecutor):
    """`local_steps` full-batch SGD steps on the mean squared error, learning rate `learning_rate`."""

    def __init__(self, *, kind: str, params: dict[str, Any]):
        job = job_params(kind, params, FedAvgLinearParams)
        super().__init__(seed=job.seed)
        # FLARE's Job API serialises constructor arguments from attributes of the same name: keep them so.
        self.kind, self.params, self.job = kind, params, job

    def task_train(self, model: FLModel, ctx: SiteContext) -> FLModel:
        x, y = load_linear_site(ctx.data_dir(self.job.dataset))
        net = build_model("linear_regression", in_features=x.shape[1])
        load_numpy_params(net, model.params)
        optimizer = torch.optim.SGD(net.parameters(), lr=self.job.learning_rate)
        for _ in range(self.job.local_steps):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(net(x).squeeze(-1), y)
            loss.backward()
            optimizer.step()
        return FLModel(
            params=state_dict_to_numpy(net),
            params_type=ParamsType.FULL,
            metrics={"train_mse": float(loss.detach())},
            meta={FLMetaKey.NUM_STEPS_CURRENT_ROUND: int(x.shape[0])},
        )
