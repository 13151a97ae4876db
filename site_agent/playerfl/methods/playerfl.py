"""PLayer-FL at a site: FedAvg's local training, with the sensitivity curve measured after the first local epoch
of the round the contract names (the paper's timing), before any further epoch of that round."""

from __future__ import annotations

from torch import nn

from site_agent.playerfl.methods.base import LocalRound, SiteMethod
from site_agent.playerfl.sensitivity import federation_sensitivity
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer


class PLayerFL(SiteMethod):
    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        if not self.contract.sends_sensitivity(trainer.round_number):
            return LocalRound(trainer.train(net))
        loss = trainer.train(net, epochs=1)
        curve = federation_sensitivity(net, trainer.loss_fn, *trainer.fresh_batch())
        if trainer.epochs > 1:
            loss = trainer.train(net, epochs=trainer.epochs - 1)
        return LocalRound(loss, curve)
