"""FedKT-CSD: what sites, server and the job agree on besides the wire format (release settings)."""

from typing import Literal, get_args

COUNT_NOISE_MULTIPLIER = 5.0  # the counts' own noise multiplier (add/remove adjacency): noise std 5 records
Adjacency = Literal["add_remove", "replace_one"]
Method = Literal["analytic", "pld", "split"]
ADJACENCIES: tuple[str, ...] = get_args(Adjacency)
METHODS: tuple[str, ...] = get_args(Method)
