"""Ditto (Li et al. 2021): sites federate a global copy as in FedAvg and keep a personal model to themselves."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class Ditto(Method):
    name = "ditto"
