"""FedProx at a site: local training pulled towards the received model by mu/2 * ||w - w_received||^2."""

from __future__ import annotations

from torch import nn

from site_agent.playerfl.methods.base import LocalRound, SiteMethod
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer, proximal_penalty


class FedProx(SiteMethod):
    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        return LocalRound(
            trainer.train(net, penalty=proximal_penalty(trainer.model_from(received), self.options.fedprox_mu))
        )
