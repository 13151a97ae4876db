"""PLayer-FL and its baselines on four-class ISIC-format sites (docs/algorithms.md#player-fl, docs/playerfl.md).

Sites need an ISIC-2019-format folder (`site-agent demo-data isic` writes synthetic ones, `site-agent
isic-federation` the paper's federation from the real ISIC 2019 set) under the dataset key.
"""

from __future__ import annotations

from fl_contract.job_params.playerfl import PLayerFLParams
from jobs import tracking
from jobs.spec import Extras, JobKind


def _extras(p: PLayerFLParams) -> Extras:
    return tracking.extras(p.tracking)


KIND = JobKind(
    name="playerfl",
    summary="PLayer-FL personalised layer-wise FL on ISIC-format sites: sites measure per-layer federation "
            "sensitivity after one epoch, the server picks the split, early layers are federated, later ones stay "
            "local; baselines by --method",
    params=PLayerFLParams,
    controller="server_app.playerfl.PLayerFLController",
    site_task="site_agent.tasks.playerfl.PLayerFLTask",
    extras=_extras,
    dataset_keys=("dataset",),
    site_classes=tracking.SITE_CLASSES,
    server_classes=tracking.SERVER_CLASSES,
    job_name=lambda p: f"playerfl-{p.method.replace('_', '-')}",
    guide="docs/playerfl.md",
)

__all__ = ["KIND", "PLayerFLParams"]
