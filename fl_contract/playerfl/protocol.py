"""What sites and server agree on for the PLayer-FL job: method names, task names and the meta keys on the wire.

Each round the server sends the global parameters of the first `SHARED_LAYERS` layers (see `layers.py`); a site
loads them over its own model, trains, and returns the same layers (FedLP: a random subset of them). Nothing but
those parameters, the training-set size, scalar metrics and, once, the sensitivity curve leaves a site. What each
method changes in that exchange is in `methods.py` (one table row per method).
"""

from __future__ import annotations

from fl_contract.playerfl.methods import REGISTRY

METHODS: tuple[str, ...] = tuple(REGISTRY)
"""local, fedavg, fedprox, ditto, fedbabu, fedlp, pfedme, playerfl, playerfl_random."""

NORMALISATIONS = ("total", "first_layer")
"""How each site's cumulative sensitivity curve is normalised before the server averages the sites' curves."""

TRAIN_TASK = "train"
CURVE_SAMPLES = "num_samples"  # in a sensitivity curve: the training samples that weight it in the mean
EVALUATE_TASK = "evaluate"
SCORE_GLOBAL_TASK = "score_global"
"""Cross-site evaluation's one extra task: the server's whole global model scored on the site's test split."""
PERSONALISED = "personalised"
"""The cross-site matrix's name of each site's own model (scored at home only: its personal layers never leave)."""

METHOD = "playerfl_method"
SHARED_LAYERS = "playerfl_shared_layers"
SENSITIVITY = "playerfl_sensitivity"
