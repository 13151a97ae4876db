"""PLayer-FL-Random (the ablation): a prefix drawn at random before round 1, other than PLayer-FL's own split and
the full model, federated from round 1 on; no curve is sent and no layer beyond the prefix is ever uploaded."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class PLayerFLRandom(Method):
    name = "playerfl_random"
    split_before_training = True
