"""pFedMe (Dinh et al. 2020): FedAvg's wire protocol with beta 1; the Moreau-envelope personal model and the local
copy it pulls are the site's business."""

from __future__ import annotations

from fl_contract.playerfl.methods.base import Method


class PFedMe(Method):
    name = "pfedme"
