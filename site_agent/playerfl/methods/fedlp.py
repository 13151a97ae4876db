"""FedLP at a site: each shared layer is sent with probability `fedlp_keep`, drawn from (seed, site, round) so a
rerun sends the same layers."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from fl_contract.playerfl.layers import Layer
from site_agent.playerfl.methods.base import SiteMethod


class FedLP(SiteMethod):
    def upload(self, shared: Sequence[Layer], site_name: str, round_number: int) -> list[Layer]:
        rng = np.random.default_rng([self.options.seed, zlib.crc32(site_name.encode()), round_number])
        return [layer for layer in shared if rng.random() < self.options.fedlp_keep]
