"""FedBABU at a site: the head stays at its initialisation during federation and is fine-tuned, with the body,
for `finetune_epochs` before the final evaluation, which scores that fine-tuned model (the paper's FedBABU): the
snapshots of the federated rounds carry an untrained head, so best-validation selection would pick among them."""

from __future__ import annotations

from torch import nn

from site_agent.playerfl.methods.base import LocalRound, SiteMethod
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer

FINETUNE_ROLE = "finetune"  # fine-tuning trains the head too: another parameter set than the body's optimizer


class FedBABU(SiteMethod):
    selects_best_snapshot = False

    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        head = set(trainer.layers[-1].keys)
        for name, param in net.named_parameters():
            param.requires_grad_(name not in head)
        return LocalRound(trainer.train(net))

    def before_evaluation(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> None:
        """`net` is freshly built, so body and head both train."""
        trainer.train(net, epochs=self.options.finetune_epochs, role=FINETUNE_ROLE)
