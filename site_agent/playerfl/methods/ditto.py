"""Ditto at a site: the global copy trains as in FedAvg, then a personal model, kept at the site and deployed,
trains pulled towards the received global model by lambda/2 * ||v - w_received||^2, with its own optimizer."""

from __future__ import annotations

import copy

from torch import nn

from site_agent.playerfl.methods.base import LocalRound, SiteMethod
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer, proximal_penalty


class Ditto(SiteMethod):
    def fresh_state(self, initial: StateDict) -> SiteState:
        """The personal model starts from the same initial weights as the global one."""
        return SiteState(model=initial, personal=copy.deepcopy(initial))

    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        """Reports the personal model's loss: it is the model this site deploys."""
        trainer.train(net)
        personal = personal_model(state, trainer, self.contract.name)
        penalty = proximal_penalty(trainer.model_from(received), self.options.ditto_lambda)
        loss = trainer.train(personal, penalty=penalty, role="personal")
        state.personal = personal.state_dict()
        return LocalRound(loss)

    def deployed(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> nn.Module:
        return personal_model(state, trainer, self.contract.name)


def personal_model(state: SiteState, trainer: LocalTrainer, method: str) -> nn.Module:
    """The personal model the site keeps (Ditto, pFedMe)."""
    if state.personal is None:
        raise RuntimeError(f"the site's saved state has no {method} personal model: "
                           "another method of this job saved it")
    return trainer.model_from(state.personal)
