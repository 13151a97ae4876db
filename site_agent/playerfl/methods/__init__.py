"""The registry of site behaviours: method name -> the `SiteMethod` class that runs it at a site."""

from __future__ import annotations

from fl_contract.playerfl.methods import get_method
from site_agent.playerfl.methods.base import LocalRound, MethodOptions, SiteMethod
from site_agent.playerfl.methods.ditto import Ditto
from site_agent.playerfl.methods.fedbabu import FedBABU
from site_agent.playerfl.methods.fedlp import FedLP
from site_agent.playerfl.methods.fedprox import FedProx
from site_agent.playerfl.methods.pfedme import PFedMe
from site_agent.playerfl.methods.playerfl import PLayerFL

SITE_METHODS: dict[str, type[SiteMethod]] = {
    "local": SiteMethod,  # trains the whole model alone: the server shares no layer with it
    "fedavg": SiteMethod,
    "fedprox": FedProx,
    "ditto": Ditto,
    "fedbabu": FedBABU,
    "fedlp": FedLP,
    "pfedme": PFedMe,
    "playerfl": PLayerFL,
    "playerfl_random": SiteMethod,  # trains as FedAvg on the prefix the server drew
}


def site_method(name: str, options: MethodOptions) -> SiteMethod:
    """The site behaviour of method `name` with the job's hyper-parameters (unknown names are refused)."""
    contract = get_method(name)
    return SITE_METHODS[name](contract, options)


__all__ = ["SITE_METHODS", "LocalRound", "MethodOptions", "SiteMethod", "site_method"]
