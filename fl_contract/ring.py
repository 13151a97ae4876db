"""The ring every masked vector lives on: Z/2^64, as little-endian uint64 words.

FedKT-CSD's statistics, the weight kinds' masked updates, the masks and their sums all use this one dtype, so every
site and the server add with the same wrap-around (numpy's unsigned addition is modulo 2^64).
"""

from __future__ import annotations

import numpy as np

RING_DTYPE = np.dtype("<u8")
