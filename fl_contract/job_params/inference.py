"""brats-inference's parameters: segment each site's unlabelled cases with a global model the server holds; and the
held model's, which brats-evaluation shares."""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.job_params.segmentation import SegResNetParams
from fl_contract.params import param
from fl_contract.result_files import BEST_MODEL_FILE


@dataclass(frozen=True)
class HeldModelParams(SegResNetParams):
    """A model the server holds, named by key and file, and the architecture and label map it must fit: every job
    kind that sends one model to the sites (inference, evaluation)."""

    model: str = param("brats", "key of the model's folder in the server's local/server_app.json (\"models\"), e.g. "
                                "a finished segmentation run's app_server/ folder")
    model_file: str = param(BEST_MODEL_FILE, "the state_dict file in that folder: best_global_model.pt (selected on "
                                             "validation) or global_model.pt (the last)")
    min_clients: int = param(1, "sites that must answer", low=1)
    seed: int = param(0, "seed of the site's task (applying one model draws nothing at random)")


@dataclass(frozen=True)
class InferenceParams(HeldModelParams):
    dataset: str = param("brats_inference", "dataset key sites map to the folder of cases to segment (one sub-folder "
                                            "per case, the four modalities; labels not needed)")
    output: str = param("brats_results", "dataset key sites map to the folder the label maps and DICOM SEGs go to (a "
                                         "sub-folder per job)")
