"""FedProx (Li et al. 2020): FedAvg's wire protocol; the proximal term is the site's business."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class FedProx(Method):
    name = "fedprox"
