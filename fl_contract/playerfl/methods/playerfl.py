"""PLayer-FL: in round 1 every layer but the last (which always stays local) and each site's sensitivity curve;
then only the prefix the server chooses from the curves."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import SENSITIVITY_ROUND, Method


class PLayerFL(Method):
    name = "playerfl"

    def initial_shared_layers(self, num_layers: int) -> int:
        """Every layer the split may federate: the last never is, so it is never uploaded."""
        return num_layers - 1

    def sends_sensitivity(self, round_index: int) -> bool:
        return round_index == SENSITIVITY_ROUND

    def chooses_split(self, round_index: int) -> bool:
        return round_index == SENSITIVITY_ROUND
