"""data-summary's parameters: what each site's data holds, counted under its policy before any training job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_contract.classes import ISIC_CLASSES, PLAYERFL_CLASSES
from fl_contract.data_summary import DATA_KINDS, GLIOMA
from fl_contract.job_params.segmentation import CaseReadingParams
from fl_contract.params import ParameterError, param


@dataclass(frozen=True)
class DataSummaryParams(CaseReadingParams):
    """The reading parameters (`label_map`, `grid`, `resample_ras_1mm`, `roi_size`, `classes`) are the planned
    training job's: the sites read their data as that job would and count what it would refuse."""

    data_kind: str = param(GLIOMA, "what the sites' dataset holds: glioma (BraTS-style MRI cases, DICOM or NIfTI) "
                                   "or isic (ISIC-2019 dermoscopy images)", choices=DATA_KINDS)
    dataset: str = param("brats", "dataset key sites map to the folder summarised (isic data: e.g. isic)")
    classes: tuple[str, ...] = param(PLAYERFL_CLASSES, "isic data: the classes the planned job trains on (comma "
                                                       "separated on the command line)", choices=ISIC_CLASSES)
    dp_noise_multiplier: float = param(0.0, "Gaussian noise on every released count, std = multiplier x sqrt(number "
                                            "of features) (a case counts once in each); charged to each site's "
                                            "budget at delta 1e-5; quantiles and scanner model names are then not "
                                            "sent; 0 = no DP (counts below min_count suppressed only)", low=0.0)
    reviewed_summary: str = param("", "dataset key of a folder holding the privacy officer's reviewed export "
                                      "(site-agent summary export), sent instead of reading the data again")
    min_clients: int = param(1, "sites that must answer", low=1)
    seed: int = param(0, "seed of the site's task (the summary draws nothing at random but its DP noise, which is "
                         "never seeded)")

    def check(self) -> None:
        if len(self.roi_size) != 3:
            raise ParameterError(f"roi_size {list(self.roi_size)}: give 3 sizes, the planned training crop")

    def content(self) -> dict[str, Any]:
        """The parameters that decide what a site sends: a reviewed export is sent only for a job with the same."""
        values: dict[str, Any] = {"data_kind": self.data_kind, "dataset": self.dataset,
                                  "dp_noise_multiplier": self.dp_noise_multiplier}
        if self.data_kind == GLIOMA:
            return values | {"label_map": self.label_map, "grid": self.grid, "resample_ras_1mm": self.resample_ras_1mm,
                             "roi_size": list(self.roi_size)}
        return values | {"classes": list(self.classes)}
