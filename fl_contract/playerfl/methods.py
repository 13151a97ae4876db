"""What sites and server must agree on about each PLayer-FL method, as one table (`REGISTRY`).

Only shared rules live here: which leading layers are federated in round 1, whether and when a site sends its
sensitivity curve, when the server chooses the federated prefix, and whether a site may upload a subset of the
shared layers. How a site trains (`site_agent.playerfl.methods`) and how the server chooses a split
(`server_app.playerfl_split`) are each side's own business.
"""

from __future__ import annotations

from dataclasses import dataclass

SENSITIVITY_ROUND = 0
"""Round (0-based) after whose local training PLayer-FL measures sensitivity and the server chooses the split."""


@dataclass(frozen=True)
class Method:
    """The defaults are FedAvg's: every layer federated every round, every shared layer sent back, no curve."""

    name: str
    summary: str
    federated: bool = True
    """False: nothing is federated; only the site's sample count and metrics reach the server (Local)."""
    kept_layers: int = 0
    """Trailing layers that never leave the site, from round 1 (FedBABU's head, PLayer-FL's last layer)."""
    partial_upload: bool = False
    """A site may send any subset of the shared layers, each layer whole (FedLP's layer dropping)."""
    split_before_training: bool = False
    """The server fixes the federated prefix before round 1, from no site input (PLayer-FL-Random)."""
    measures_sensitivity: bool = False
    """Sites send their sensitivity curve with the update of SENSITIVITY_ROUND, and the server chooses the split
    from those updates (PLayer-FL)."""

    def initial_shared_layers(self, num_layers: int) -> int:
        """Leading layers federated from round 1 on (until the server chooses a split, for methods that do)."""
        return num_layers - self.kept_layers if self.federated else 0

    def sends_sensitivity(self, round_index: int) -> bool:
        """Whether a site's update of round `round_index` (0-based) carries its sensitivity curve."""
        return self.measures_sensitivity and round_index == SENSITIVITY_ROUND

    def chooses_split(self, round_index: int) -> bool:
        """Whether the server chooses the federated prefix from the updates of round `round_index` (0-based)."""
        return self.measures_sensitivity and round_index == SENSITIVITY_ROUND


REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method("local", "every site trains alone (the personalisation floor)", federated=False),
    Method("fedavg", "FedAvg (McMahan et al. 2017): every layer federated every round"),
    Method("fedprox", "FedProx (Li et al. 2020): FedAvg's wire protocol; the proximal term is the site's business"),
    Method("ditto", "Ditto (Li et al. 2021): a global copy federated as in FedAvg, a personal model kept at the site"),
    Method("fedbabu", "FedBABU (Oh et al. 2022): the body federated, the head (last layer) never leaves the site",
           kept_layers=1),
    Method("fedlp", "FedLP (Zhu et al. 2023): each site drops each shared layer at random; the server averages the "
                    "layers it gets", partial_upload=True),
    Method("pfedme", "pFedMe (Dinh et al. 2020): FedAvg's wire protocol with beta 1; the Moreau-envelope personal "
                     "model and the local copy it pulls are the site's business"),
    Method("playerfl", "PLayer-FL: in round 1 every layer but the last (which always stays local) and each site's "
                       "sensitivity curve; then only the prefix the server chooses from the curves",
           kept_layers=1, measures_sensitivity=True),
    Method("playerfl_random", "PLayer-FL-Random (the ablation): a prefix drawn at random before round 1, other than "
                              "PLayer-FL's own split and the full model, federated from round 1 on; no curve sent",
           split_before_training=True),
)}


def get_method(name: str) -> Method:
    """The method called `name`; an unknown name is refused with the choices, so a typo in a job fails at once."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; choose one of {list(REGISTRY)}")
    return REGISTRY[name]
