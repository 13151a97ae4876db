"""FedKT-CSD: what sites, server and the job agree on besides the wire format (release settings)."""

from typing import Literal, get_args

COUNT_NOISE_MULTIPLIER = 5.0  # the counts' own noise multiplier (add/remove adjacency): noise std 5 records
Adjacency = Literal["add_remove", "replace_one"]
Method = Literal["analytic", "pld", "split"]
# How the release estimates each class's covariance from the noisy statistics: the paper's own class moments, shrunk
# toward the classes' pooled covariance as far as the noise calls for, or the pooled one for every class
# (docs/fedkt-csd.md#class-covariances-per-class-shrunk-or-pooled).
CovarianceEstimate = Literal["shrunk", "per_class", "pooled"]
ADJACENCIES: tuple[str, ...] = get_args(Adjacency)
METHODS: tuple[str, ...] = get_args(Method)
COVARIANCE_ESTIMATES: tuple[str, ...] = get_args(CovarianceEstimate)
