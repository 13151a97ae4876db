"""brats-evaluation's parameters: score a model the server holds on every site's labelled cases."""

from __future__ import annotations

from dataclasses import dataclass

from fl_contract.job_params.inference import HeldModelParams
from fl_contract.params import param


@dataclass(frozen=True)
class EvaluationParams(HeldModelParams):
    dataset: str = param("brats", "dataset key sites map to their labelled cases (one sub-folder per case, the four "
                                  "modalities and the label map); every case is scored")
    case_metrics: bool = param(False, "ask each site for its per-case scores too (pseudonymised rows); a site sends "
                                      "them only if its policy allows (share_case_metrics) and it scored at least its "
                                      "policy's min_cases cases")
