"""pFedMe at a site (Dinh et al. 2020, lambda 0.1 as in the PLayer-FL paper, beta 1).

The site keeps a personal model theta and, from the received global model, a local copy w. For every training
batch theta takes `pfedme_steps` inner steps on the Moreau-envelope problem f(theta; batch) + lambda/2 ||theta - w||^2
(w fixed), then w steps along lambda (w - theta), the gradient of the envelope; w goes back to the server, which
averages it (beta 1: the average is the new global model), and theta is the model the site deploys. Deviation:
both steps use the site's Adam (one per role, kept across rounds) at the job's learning rate, where the paper takes
plain gradient steps with its own rates; at lambda 0.1 an SGD step of w would move it a ten-thousandth of the way
to theta at lr 1e-3. w's BatchNorm statistics, which never see data, follow theta's.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from fl_contract.precision import select_precision
from site_agent.playerfl.methods.base import LocalRound, SiteMethod
from site_agent.playerfl.methods.ditto import personal_model
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer, check_finite


class PFedMe(SiteMethod):
    def fresh_state(self, initial: StateDict) -> SiteState:
        """The personal model starts from the same initial weights as the global one."""
        return SiteState(model=initial, personal=copy.deepcopy(initial))

    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        """Reports theta's task loss on the round's batches: it is the model this site deploys."""
        lam, steps = self.options.pfedme_lambda, self.options.pfedme_steps
        theta = personal_model(state, trainer, self.contract.name)
        precision = select_precision(trainer.device)
        scaler = precision.scaler()
        net.train()
        theta.train()
        total, count = 0.0, 0
        with trainer.optimizer(theta, "personal") as inner, trainer.optimizer(net, "model") as outer:
            for images, labels in trainer.batches():
                for _ in range(steps):
                    inner.zero_grad()
                    with precision.autocast():
                        task_loss = trainer.loss_fn(theta(images), labels)
                    scaler.scale(task_loss + lam / 2 * _squared_distance(theta, net)).backward()
                    scaler.step(inner)
                    scaler.update()
                outer.zero_grad()
                with torch.no_grad():
                    for w, t in zip(net.parameters(), theta.parameters()):
                        w.grad = lam * (w - t)
                outer.step()
                total, count = total + float(task_loss.detach()) * len(labels), count + len(labels)
        loss = total / count
        check_finite(loss)
        with torch.no_grad():
            for w_buffer, t_buffer in zip(net.buffers(), theta.buffers()):
                w_buffer.copy_(t_buffer)
        state.personal = theta.state_dict()
        return LocalRound(loss)

    def deployed(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> nn.Module:
        return personal_model(state, trainer, self.contract.name)


def _squared_distance(model: nn.Module, anchor: nn.Module) -> Tensor:
    """||theta - w||^2 over all parameters, w held fixed."""
    return torch.stack([((p - a.detach()) ** 2).sum() for p, a in zip(model.parameters(), anchor.parameters())]).sum()
