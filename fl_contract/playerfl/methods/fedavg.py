"""FedAvg (McMahan et al. 2017): every layer federated every round; the base rules as they are."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class FedAvg(Method):
    name = "fedavg"
