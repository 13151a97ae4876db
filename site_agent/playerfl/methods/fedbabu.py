"""FedBABU at a site: the head stays at its initialisation during federation and is fine-tuned, with the body,
for `finetune_epochs` before the final evaluation."""

from __future__ import annotations

from torch import nn

from site_agent.playerfl.methods.base import SiteMethod
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer


class FedBABU(SiteMethod):
    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> float:
        head = set(trainer.layers[-1].keys)
        for name, param in net.named_parameters():
            param.requires_grad_(name not in head)
        return trainer.train(net)

    def before_evaluation(self, net: nn.Module, trainer: LocalTrainer) -> None:
        """`net` is freshly built, so body and head both train."""
        trainer.train(net, epochs=self.options.finetune_epochs)
