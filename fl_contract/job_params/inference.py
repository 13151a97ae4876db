"""brats-inference's parameters: segment each site's unlabelled cases with a global model the server holds."""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.job_params.held_model import HeldSegResNetParams
from fl_contract.params import param


@dataclass(frozen=True)
class InferenceParams(HeldSegResNetParams):
    dataset: str = param("brats_inference", "dataset key sites map to the folder of cases to segment (one sub-folder "
                                            "per case, the four modalities; labels not needed)")
    output: str = param("brats_results", "dataset key sites map to the folder the label maps and DICOM SEGs go to (a "
                                         "sub-folder per job)")
