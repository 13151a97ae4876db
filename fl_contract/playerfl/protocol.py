"""What sites and server agree on for the PLayer-FL job: method names, task names and the meta keys on the wire.

Each round the server sends the global parameters of the first `SHARED_LAYERS` layers (see `layers.py`); a site
loads them over its own model, trains, and returns the same layers (FedLP: a random subset of them). Nothing but
those parameters, the training-set size, scalar metrics and, once, the sensitivity curve leaves a site.
"""

from __future__ import annotations

METHODS = ("local", "fedavg", "fedprox", "ditto", "fedbabu", "fedlp", "playerfl", "playerfl_random")
SPLIT_METHODS = ("playerfl", "playerfl_random")
"""Methods that send every layer in round 1, then only the prefix chosen by the server."""

TRAIN_TASK = "train"
EVALUATE_TASK = "evaluate"

METHOD = "playerfl_method"
SHARED_LAYERS = "playerfl_shared_layers"
SENSITIVITY = "playerfl_sensitivity"


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {list(METHODS)}")
    return method


def initial_shared_layers(method: str, num_layers: int) -> int:
    """Leading layers federated in round 1: none for Local, all but the head for FedBABU, otherwise all."""
    check_method(method)
    if method == "local":
        return 0
    if method == "fedbabu":
        return num_layers - 1
    return num_layers
