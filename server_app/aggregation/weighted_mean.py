"""FedAvg's rule: the mean of the sites' parameters weighted by their number of training samples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from server_app.aggregation.updates import SiteUpdate, Weights, as_original_dtype, stack


def weighted_mean(updates: Sequence[SiteUpdate]) -> Weights:
    weights = np.array([u.num_samples for u in updates], dtype=np.float64)
    weights /= weights.sum()
    result = {}
    for name in updates[0].params:
        values = stack(updates, name)
        result[name] = as_original_dtype(np.tensordot(weights, values, axes=1), updates, name)
    return result
