"""Coordinate-wise trimmed mean: drop the `trim_fraction` largest and smallest values per coordinate, average the rest.

Sample counts are ignored on purpose (see `median`). With n sites, floor(trim_fraction * n) values are dropped at
each end; at least one value must remain.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from server_app.aggregation.updates import SiteUpdate, Weights, as_original_dtype, stack


def trimmed_mean(updates: Sequence[SiteUpdate], trim_fraction: float = 0.1) -> Weights:
    if not 0.0 <= trim_fraction < 0.5:
        raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction}")
    n = len(updates)
    k = int(np.floor(trim_fraction * n))
    result = {}
    for name in updates[0].params:
        values = np.sort(stack(updates, name), axis=0)
        result[name] = as_original_dtype(values[k : n - k].mean(axis=0), updates, name)
    return result
