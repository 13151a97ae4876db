"""The registry of PLayer-FL methods: name -> the rules both sides follow (`base.Method`), in the job's order."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method
from fl_contract.playerfl.methods.ditto import Ditto
from fl_contract.playerfl.methods.fedavg import FedAvg
from fl_contract.playerfl.methods.fedbabu import FedBABU
from fl_contract.playerfl.methods.fedlp import FedLP
from fl_contract.playerfl.methods.fedprox import FedProx
from fl_contract.playerfl.methods.local import Local
from fl_contract.playerfl.methods.pfedme import PFedMe
from fl_contract.playerfl.methods.playerfl import PLayerFL
from fl_contract.playerfl.methods.playerfl_random import PLayerFLRandom

REGISTRY: dict[str, Method] = {m.name: m for m in (Local(), FedAvg(), FedProx(), Ditto(), FedBABU(), FedLP(), PFedMe(),
                                                    PLayerFL(), PLayerFLRandom())}


def get_method(name: str) -> Method:
    """The method called `name`; an unknown name is refused with the choices, so a typo in a job fails at once."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {list(REGISTRY)}")
    return REGISTRY[name]


__all__ = ["REGISTRY", "Method", "get_method"]
