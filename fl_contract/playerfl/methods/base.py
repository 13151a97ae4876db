"""What sites and server must agree on about a PLayer-FL method; one subclass per method, one module each.

Only shared rules live here: which leading layers are federated in round 1, whether and when a site sends its
sensitivity curve, when the server chooses the federated prefix, and whether a site may upload a subset of the
shared layers. How a site trains (`site_agent.playerfl.methods`) and how the server chooses a split
(`server_app.playerfl_split`) are each side's own business.
"""

from __future__ import annotations

from typing import ClassVar

SENSITIVITY_ROUND = 0
"""Round (0-based) after whose local training PLayer-FL measures sensitivity and the server chooses the split."""


class Method:
    """The defaults are FedAvg's: every layer federated every round, every shared layer sent back, no curve."""

    name: ClassVar[str]
    partial_upload: ClassVar[bool] = False
    """A site may send any subset of the shared layers, each layer whole (FedLP's layer dropping)."""
    split_before_training: ClassVar[bool] = False
    """The server fixes the federated prefix before round 1, from no site input (PLayer-FL-Random)."""

    def initial_shared_layers(self, num_layers: int) -> int:
        """Leading layers federated from round 1 on (until the server chooses a split, for methods that do)."""
        return num_layers

    def sends_sensitivity(self, round_index: int) -> bool:
        """Whether a site's update of round `round_index` (0-based) carries its sensitivity curve."""
        return False

    def chooses_split(self, round_index: int) -> bool:
        """Whether the server chooses the federated prefix from the updates of round `round_index` (0-based)."""
        return False
