"""FedBABU (Oh et al. 2022): the body is federated, the head (last layer) never leaves the site."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class FedBABU(Method):
    name = "fedbabu"

    def initial_shared_layers(self, num_layers: int) -> int:
        """Every layer but the head."""
        return num_layers - 1
