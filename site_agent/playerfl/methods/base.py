"""A method's behaviour at a site: the hooks the PLayer-FL site task calls, FedAvg's behaviour by default.

Subclasses (one module per method that differs locally) override only what their method changes; what both sides
must agree on is the method's contract (`fl_contract.playerfl.methods`), held as `contract`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from fl_contract.playerfl.layers import Layer
from fl_contract.playerfl.methods import Method
from site_agent.playerfl.sensitivity import SensitivityCurve
from site_agent.playerfl.state import SiteState, StateDict
from site_agent.playerfl.training import LocalTrainer


@dataclass(frozen=True)
class MethodOptions:
    """The baselines' hyper-parameters as the job sets them (reference values: docs/algorithms.md#baselines)."""

    fedprox_mu: float
    ditto_lambda: float
    fedlp_keep: float
    pfedme_lambda: float
    pfedme_steps: int
    finetune_epochs: int
    seed: int


@dataclass(frozen=True)
class LocalRound:
    """What a round of local training reports: the deployed model's last training loss and, when the contract
    asks for it, the sensitivity curve measured during the round."""

    loss: float
    sensitivity: SensitivityCurve | None = None


class SiteMethod:
    """Train the received model as it is, deploy it, send back every shared layer."""

    selects_best_snapshot: ClassVar[bool] = True
    """The final evaluation scores the best-validation snapshot; otherwise the model `before_evaluation` leaves."""

    def __init__(self, contract: Method, options: MethodOptions):
        self.contract = contract
        self.options = options

    def fresh_state(self, initial: StateDict) -> SiteState:
        """The site's state before its first round of the job."""
        return SiteState(model=initial)

    def train(self, net: nn.Module, received: StateDict, state: SiteState, trainer: LocalTrainer) -> LocalRound:
        """One round of local training of `net` (the received layers over the site's own).

        `received` is `net` as it was before training (the proximal methods' anchor); `state` may be updated.
        """
        return LocalRound(trainer.train(net))

    def deployed(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> nn.Module:
        """The model this site would use now: what validation scores and the best snapshot keeps."""
        return net

    def before_evaluation(self, net: nn.Module, state: SiteState, trainer: LocalTrainer) -> None:
        """Last local step on the final received model before it is validated and scored."""

    def upload(self, shared: Sequence[Layer], site_name: str, round_number: int) -> list[Layer]:
        """The shared layers this site sends back this round."""
        return list(shared)
