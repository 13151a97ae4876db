"""PLayer-FL: all layers and each site's sensitivity curve in round 1; then only the prefix the server chooses."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import SENSITIVITY_ROUND, Method


class PLayerFL(Method):
    name = "playerfl"

    def sends_sensitivity(self, round_index: int) -> bool:
        return round_index == SENSITIVITY_ROUND

    def chooses_split(self, round_index: int) -> bool:
        return round_index == SENSITIVITY_ROUND
