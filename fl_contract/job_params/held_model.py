"""The parameters every kind shares that sends the sites one model the server holds (inference, evaluation): which
model, what it must be, and how many sites must answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.job_params.segmentation import SegResNetParams
from fl_contract.params import FederationParams, param
from fl_contract.result_files import BEST_MODEL_FILE
from fl_contract.segmentation import MODEL


@dataclass(frozen=True)
class HeldModelParams(FederationParams):
    """A model the server holds, named by key and file; each kind says which network it must load into
    (`model_spec`) and what the run that made it must have used (`made_with`)."""

    model: str = param("brats", "key of the model's folder in the server's local/server_app.json (\"models\"), e.g. "
                                "a finished run's app_server/ folder")
    model_file: str = param(BEST_MODEL_FILE, "the state_dict file in that folder: best_global_model.pt (selected on "
                                             "validation) or global_model.pt (the last)")
    min_clients: int = param(1, "sites that must answer", low=1)
    seed: int = param(0, "seed of the site's task (applying one model draws nothing at random)")

    def model_spec(self) -> tuple[str, dict[str, Any]]:
        """The network (fl_contract.models name and arguments) the held model must load into."""
        raise NotImplementedError

    def made_with(self) -> dict[str, Any]:
        """The values the run that made the model must have had, by the name its results.json's `job` gives them
        (checked when that file lies beside the model)."""
        raise NotImplementedError


@dataclass(frozen=True)
class HeldSegResNetParams(HeldModelParams, SegResNetParams):
    """A held SegResNet: its architecture and label map are the job's (a BraTS 2021 model read with BraTS 2023
    labels would be silently wrong at every site)."""

    def model_spec(self) -> tuple[str, dict[str, Any]]:
        return MODEL, self.model_args()

    def made_with(self) -> dict[str, Any]:
        return {"label_map": self.label_map, "init_filters": self.init_filters,
                "blocks_down": list(self.blocks_down), "blocks_up": list(self.blocks_up)}
