"""playerfl's parameters: PLayer-FL and its baselines on four-class ISIC-format sites (docs/algorithms.md#player-fl,
docs/playerfl.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.masked_weights import SecureWeightsParams
from fl_contract.params import ParameterError, RoundParams, param
from fl_contract.playerfl.protocol import METHODS, NORMALISATIONS
from fl_contract.weights_encoding import WeightsEncodingParams


@dataclass(frozen=True)
class PLayerFLParams(WeightsEncodingParams, SecureWeightsParams, RoundParams):
    method: str = param("playerfl", "PLayer-FL or a baseline", choices=METHODS)
    num_rounds: int = param(50, "federation rounds, one local pass of local_epochs each (reference: 50-60)", low=1)
    model: str = param("cnn5", "cnn5 (the paper's ISIC CNN: 5 convolutions, global pooling, 2 linear layers) or "
                               "resnet10 (MONAI, batch norm; a residual block is one layer)",
                       choices=("cnn5", "resnet10"))
    model_args: dict[str, Any] | None = param(None, 'extra model arguments as JSON, e.g. {"channels": [8, 16, 32, 64, '
                                                    '128], "hidden": 64} for a narrow CNN5', metavar="JSON")
    image_size: int = param(200, "images are resized to image_size x image_size (reference: 200)", low=8)
    threshold: float = param(1.5, "PLayer-FL's split threshold t on F_l / F_{l-1} of the federation's curve", low=1.0)
    curve_normalisation: str = param("total", "PLayer-FL: each site's cumulative curve is divided by its total "
                                              "(or by its first layer) before the sites' curves are averaged",
                                     choices=NORMALISATIONS)
    playerfl_split: int = param(0, "PLayer-FL-Random: PLayer-FL's p on the same sites and seed, left out of the draw "
                                   "(0: unknown, only the full model is left out)", low=0)
    local_epochs: int = param(1, "local epochs per round (reference: 1)", low=1)
    batch_size: int = param(128, "local batch size (reference: 128)", low=1)
    learning_rate: float = param(1e-3, "Adam step size (reference: searched per method)", low=0.0)
    weight_decay: float = param(1e-4, "Adam weight decay (reference: 1e-4)", low=0.0)
    focal_gamma: float = param(1.0, "focal loss gamma (reference ISIC: 1; alpha is the site's inverse class "
                                    "frequency)", low=0.0)
    fedprox_mu: float = param(0.1, "FedProx proximal weight mu (reference: 0.1)", low=0.0)
    ditto_lambda: float = param(0.1, "Ditto regularisation lambda (reference: 0.1)", low=0.0)
    fedlp_keep: float = param(0.7, "FedLP layer keep probability (reference: 0.7)", low=0.0, high=1.0)
    pfedme_lambda: float = param(0.1, "pFedMe regularisation lambda (reference: 0.1)", low=0.0)
    pfedme_steps: int = param(5, "pFedMe inner steps on the personal model per batch (pFedMe's K: 5)", low=1)
    finetune_epochs: int = param(1, "FedBABU's local fine-tuning epochs at the end", low=0)
    tracking: bool = param(True, "per-site metrics to TensorBoard through FLARE's experiment tracking")
    min_clients: int = param(2, "sites that must take part", low=1)
    dataset: str = param("isic", "dataset key sites map to their ISIC folder in site_agent.json")
    seed: int = param(0, "initial weights, data split, shuffling, augmentation, FedLP draws, PLayer-FL-Random's split")
    cross_site_evaluation: bool = param(False, "after the final evaluation, each site also scores the server's whole "
                                               "global model on its test split: a sites x {personalised, global} "
                                               "matrix in results.json (personal layers never leave a site, so each "
                                               "personalised model is scored at home only)")

    def check(self) -> None:
        super().check()
        if self.secure_aggregation and self.method == "local":
            raise ParameterError("method='local' shares no weights: secure_aggregation has nothing to mask")
        if self.cross_site_evaluation and self.method == "local":
            raise ParameterError("method='local' federates nothing: there is no global model to score "
                                 "(cross_site_evaluation)")

    def model_arguments(self) -> dict[str, Any]:
        """The classifier's arguments: four classes, then the job's own."""
        return {"num_classes": len(PLAYERFL_CLASSES), **(self.model_args or {})}
