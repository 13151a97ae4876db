"""Coordinate-wise median: robust to a minority of faulty or poisoned sites.

Sample counts are ignored on purpose: a site could inflate its count to dominate a weighted rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from server_app.aggregation.updates import SiteUpdate, Weights, as_original_dtype, stack


def coordinate_median(updates: Sequence[SiteUpdate]) -> Weights:
    return {
        name: as_original_dtype(np.median(stack(updates, name), axis=0), updates, name) for name in updates[0].params
    }
