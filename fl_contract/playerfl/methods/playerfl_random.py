"""PLayer-FL-Random: PLayer-FL's schedule with a split drawn at random, so no curve is sent (the ablation)."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import SENSITIVITY_ROUND, Method


class PLayerFLRandom(Method):
    name = "playerfl_random"

    def chooses_split(self, round_index: int) -> bool:
        return round_index == SENSITIVITY_ROUND
