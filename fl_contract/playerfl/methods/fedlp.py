"""FedLP (Zhu et al. 2023): each site drops each shared layer at random; the server averages the layers it gets."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class FedLP(Method):
    name = "fedlp"
    partial_upload = True
