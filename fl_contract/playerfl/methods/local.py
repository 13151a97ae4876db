"""Local: every site trains alone; only its sample count and metrics reach the server (the personalisation floor)."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class Local(Method):
    name = "local"

    def initial_shared_layers(self, num_layers: int) -> int:
        """Nothing is federated."""
        return 0
