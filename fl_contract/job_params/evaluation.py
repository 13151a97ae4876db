"""The evaluation kinds' parameters: score a model the server holds on every site's labelled cases (brats-evaluation)
or images (isic-evaluation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.classes import PLAYERFL_CLASSES
from fl_contract.job_params.held_model import HeldModelParams, HeldSegResNetParams
from fl_contract.params import param
from fl_contract.result_files import GLOBAL_MODEL_FILE


@dataclass(frozen=True)
class EvaluationParams(HeldSegResNetParams):
    dataset: str = param("brats", "dataset key sites map to their labelled cases (one sub-folder per case, the four "
                                  "modalities and the label map); every case is scored")
    case_metrics: bool = param(False, "ask each site for its per-case scores too (pseudonymised rows); a site sends "
                                      "them only if its policy allows (share_case_metrics) and it scored at least its "
                                      "policy's min_cases cases")


@dataclass(frozen=True)
class IsicEvaluationParams(HeldModelParams):
    """isic-evaluation's: a four-class ISIC classifier the server holds, scored on every image of each site."""

    model: str = param("isic", "key of the classifier's folder in the server's local/server_app.json (\"models\"), "
                               "e.g. a finished playerfl run's app_server/ folder")
    model_file: str = param(GLOBAL_MODEL_FILE, "the state_dict file in that folder (a whole classifier: a fedavg "
                                               "run's global_model.pt)")
    network: str = param("cnn5", "the classifier's network: cnn5 (the paper's ISIC CNN) or resnet10 (MONAI)",
                         choices=("cnn5", "resnet10"))
    model_args: dict[str, Any] | None = param(None, "the network's extra arguments as its run had them (JSON), e.g. "
                                                    '{"channels": [8, 16, 32, 64, 128], "hidden": 64}',
                                              metavar="JSON")
    image_size: int = param(200, "images are resized to image_size x image_size, as in the run that trained it",
                            low=8)
    dataset: str = param("isic", "dataset key sites map to their ISIC-format folder; every image of the four "
                                 "classes is scored")

    def model_spec(self) -> tuple[str, dict[str, Any]]:
        """Four classes, then the job's own arguments (PLayer-FL's `model_arguments`)."""
        return self.network, {"num_classes": len(PLAYERFL_CLASSES), **(self.model_args or {})}

    def made_with(self) -> dict[str, Any]:
        return {"model": self.network, "model_args": self.model_args, "image_size": self.image_size}
