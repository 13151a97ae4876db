"""PLayer-FL and its baselines on four-class ISIC-format sites (ALGORITHMS.md, docs/playerfl.md).

Sites need an ISIC-2019-format folder (`site-agent demo-data isic` writes synthetic ones) under the dataset key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.playerfl.protocol import METHODS
from jobs.spec import Apps, FederationParams, JobKind, param


@dataclass(frozen=True)
class PLayerFLParams(FederationParams):
    method: str = param("playerfl", "PLayer-FL or a baseline", choices=METHODS)
    num_rounds: int = param(50, "federation rounds, one local pass of local_epochs each (reference: 50-60)", low=1)
    model: str = param("cnn5", "cnn5 (the paper's 5-conv CNN) or resnet10 (MONAI, batch norm)",
                       choices=("cnn5", "resnet10"))
    model_args: dict[str, Any] | None = param(None, 'extra model arguments as JSON, e.g. {"channels": [8, 16, 32, 64, '
                                                    '128]} for a narrow CNN5', metavar="JSON")
    image_size: int = param(200, "images are resized to image_size x image_size (reference: 200)", low=8)
    threshold: float = param(1.5, "PLayer-FL's split threshold t on F_l / F_{l-1} (see docs/playerfl.md)", low=1.0)
    local_epochs: int = param(1, "local epochs per round (reference: 1)", low=1)
    batch_size: int = param(128, "local batch size (reference: 128)", low=1)
    learning_rate: float = param(1e-3, "Adam step size (reference: 1e-3)", low=0.0)
    weight_decay: float = param(1e-4, "Adam weight decay (reference: 1e-4)", low=0.0)
    focal_gamma: float = param(2.0, "focal loss gamma", low=0.0)
    fedprox_mu: float = param(0.1, "FedProx proximal weight mu (reference: 0.1)", low=0.0)
    ditto_lambda: float = param(0.1, "Ditto regularisation lambda (reference: 0.1)", low=0.0)
    fedlp_keep: float = param(0.7, "FedLP layer keep probability (reference: 0.7)", low=0.0, high=1.0)
    finetune_epochs: int = param(1, "FedBABU's local fine-tuning epochs at the end", low=0)
    min_clients: int = param(2, "sites that must take part", low=1)
    dataset: str = param("isic", "dataset key sites map to their ISIC folder in site_agent.json")
    seed: int = param(0, "initial weights, data split, shuffling, FedLP draws, PLayer-FL-Random's split")


def model_arguments(p: PLayerFLParams) -> dict[str, Any]:
    """The classifier's arguments for four classes at `image_size` (CNN5's flattened size depends on it)."""
    arguments: dict[str, Any] = {"num_classes": len(PLAYERFL_CLASSES)}
    if p.model == "cnn5":
        arguments["in_size"] = p.image_size
    return {**arguments, **(p.model_args or {})}


def _apps(p: PLayerFLParams) -> Apps:
    model = {"model": p.model, "model_args": model_arguments(p), "method": p.method, "seed": p.seed}
    return Apps(
        controller={**model, "num_rounds": p.num_rounds, "threshold": p.threshold, "min_clients": p.min_clients},
        site_task={**model, "dataset": p.dataset, "image_size": p.image_size, "local_epochs": p.local_epochs,
                   "batch_size": p.batch_size, "learning_rate": p.learning_rate, "weight_decay": p.weight_decay,
                   "focal_gamma": p.focal_gamma, "fedprox_mu": p.fedprox_mu, "ditto_lambda": p.ditto_lambda,
                   "fedlp_keep": p.fedlp_keep, "finetune_epochs": p.finetune_epochs},
    )


KIND = JobKind(
    name="playerfl",
    summary="PLayer-FL personalised layer-wise FL on ISIC-format sites: sites measure per-layer federation "
            "sensitivity after one epoch, the server picks the split, early layers are federated, later ones stay "
            "local; baselines by --method",
    params=PLayerFLParams,
    controller="server_app.playerfl.PLayerFLController",
    site_task="site_agent.tasks.playerfl.PLayerFLTask",
    apps=_apps,
    dataset_keys=("dataset",),
    job_name=lambda p: f"playerfl-{p.method.replace('_', '-')}",
    demo="jobs.playerfl.demo:DEMOS",
    guide="docs/playerfl.md",
)
