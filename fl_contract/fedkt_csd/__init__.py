"""FedKT-CSD: what sites, server and the job agree on besides the wire format (release settings, site minimum)."""

from typing import Literal, get_args

COUNT_NOISE_MULTIPLIER = 5.0  # the counts' own noise multiplier (add/remove adjacency): noise std 5 records
MIN_SITES = 3  # with two sites, each could work out the other's statistics from the sum and its own
Adjacency = Literal["add_remove", "replace_one"]
Method = Literal["analytic", "pld", "split"]
ADJACENCIES: tuple[str, ...] = get_args(Adjacency)
METHODS: tuple[str, ...] = get_args(Method)
