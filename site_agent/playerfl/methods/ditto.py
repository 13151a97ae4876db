"""Ditto at a site: the global copy trains as in FedAvg, then a personal model, kept at the site and deployed,
trains pulled towards the received global model by lambda/2 * ||v - w_received||^2."""

from __future__ import annotations

import copy

from torch import nn

from site_agent.playerfl.methods.base import SiteMethod
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer, proximal_penalty


class Ditto(SiteMethod):
    def fresh_state(self, initial: StateDict) -> SiteState:
        """The personal model starts from the same initial weights as the global one."""
        return SiteState(model=initial, personal=copy.deepcopy(initial))

    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> float:
        """Returns the personal model's loss: it is the model this site deploys."""
        trainer.train(net)
        personal = _personal(state, trainer)
        loss = trainer.train(personal, penalty=proximal_penalty(trainer.model_from(received), self.options.ditto_lambda))
        state.personal = personal.state_dict()
        return loss

    def deployed(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> nn.Module:
        return _personal(state, trainer)


def _personal(state: SiteState, trainer: LocalTrainer) -> nn.Module:
    if state.personal is None:
        raise RuntimeError("the site's saved state has no Ditto personal model: another method of this job saved it")
    return trainer.model_from(state.personal)
