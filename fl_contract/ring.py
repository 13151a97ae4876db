"""The ring every masked vector lives on: Z/2^64, as little-endian uint64 words; and the fewest sites a masked sum
may have.

FedKT-CSD's statistics, the weight kinds' masked updates, the masks and their sums all use this one dtype, so every
site and the server add with the same wrap-around (numpy's unsigned addition is modulo 2^64).
"""

from __future__ import annotations

import numpy as np

RING_DTYPE = np.dtype("<u8")
MIN_MASKED_SITES = 3
"""The fewest sites whose vectors are summed under masks (FedKT-CSD's statistics, masked weights): the sum of two
hides nothing, since each site can subtract its own part and read the other's."""
