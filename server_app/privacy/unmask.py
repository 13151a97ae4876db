"""Server side of secure aggregation: the sum of the sites' masked vectors, in which the pairwise masks cancel.

The masks cancel only if every site of the key exchange contributed; with one missing, the sum is the plain sum
plus that site's masks, unusable, and removing them would need the missing site's seeds. We refuse rather than
unmask partially: rerun the aggregation with a fresh key exchange among the sites still present.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from fl_contract.fedkt.wire import RING_DTYPE


def unmask_sum(masked: Mapping[str, np.ndarray], key_exchange_sites: Iterable[str]) -> np.ndarray:
    """Sum of the masked uint64 vectors mod 2^64; raises naming the sites that break the key exchange's set."""
    expected = set(key_exchange_sites)
    if not expected:
        raise ValueError("no site took part in the key exchange; nothing to aggregate")
    missing, unexpected = sorted(expected - masked.keys()), sorted(masked.keys() - expected)
    if missing:
        raise ValueError(f"site(s) {', '.join(missing)} took part in the key exchange but sent no masked statistics: "
                         "their masks do not cancel, so no sum is released; rerun the aggregation with a fresh "
                         "key exchange among the sites still present")
    if unexpected:
        raise ValueError(f"site(s) {', '.join(unexpected)} sent masked statistics without taking part in the "
                         "key exchange; refusing the aggregation")
    lengths = {vector.size for vector in masked.values()}
    for site, vector in masked.items():
        if vector.dtype != RING_DTYPE or vector.ndim != 1 or len(lengths) != 1:
            raise ValueError(f"site {site} sent a {vector.dtype} vector of shape {vector.shape}; expected 1-D "
                             f"uint64 vectors of one common length (lengths received: {sorted(lengths)})")
    total = np.zeros(lengths.pop(), dtype=RING_DTYPE)
    for site in sorted(masked):
        np.add(total, masked[site], out=total)
    return total
