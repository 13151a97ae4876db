"""Segment a site's unlabelled cases with a given model and write what a clinician opens: per case a BraTS label
map as NIfTI (the case's own grid and affine) and, when the case came as DICOM series, a DICOM Segmentation object
over the reference series (T1 post-contrast), which PACS viewers overlay on it.

Cases are read and normalised exactly as for validation (site_agent.segmentation.data), predicted with the same
sliding window and made into the same nested label map (site_agent.segmentation.predict) that sites score.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from monai.data.meta_tensor import MetaTensor
from monai.transforms.compose import Compose
from monai.transforms.spatial.array import ResampleToMatch
from torch import nn

from fl_contract.job_params.segmentation import SlidingWindow
from fl_contract.labels import LabelMap
from site_agent.data.brats_case import MODALITIES, REFERENCE_MODALITY, BratsCase, GridPolicy, brats_transforms
from site_agent.data.dicom_seg import write_dicom_seg
from site_agent.data.pipeline import surface_data_errors
from site_agent.data.readers.nifti import write_nifti
from site_agent.segmentation.data import normalise, ras_1mm
from site_agent.segmentation.predict import label_map_from_regions, region_logits, regions_from_logits

NIFTI_SUFFIX = ".nii.gz"
DICOM_SEG_SUFFIX = ".seg.dcm"


@dataclass(frozen=True)
class CaseOutput:
    """What was written for one case, and how long it took (read, predict, write)."""

    case_id: str
    nifti: Path
    dicom_seg: Path | None
    seconds: float


def output_paths(out_dir: Path, case_id: str) -> tuple[Path, Path]:
    """`<out>/<case id>.nii.gz` and `<out>/<case id>.seg.dcm`."""
    return out_dir / f"{case_id}{NIFTI_SUFFIX}", out_dir / f"{case_id}{DICOM_SEG_SUFFIX}"


def segment_cases(net: nn.Module, cases: Sequence[BratsCase], out_dir: Path, window: SlidingWindow,
                  device: torch.device, label_map: LabelMap, model_description: str, grid: GridPolicy = "refuse",
                  resample_ras_1mm: bool = False, should_stop: Callable[[], bool] = lambda: False) -> list[CaseOutput]:
    """Predict and write every case (labels, if a case has them, are read and checked but not used). With
    `resample_ras_1mm` the network sees the case in RAS at 1 mm, and its label map is resampled back (nearest
    neighbour) onto the case's own grid."""
    load = brats_transforms(label_map, grid)
    prepare = Compose([*(ras_1mm() if resample_ras_1mm else []), normalise()])
    net.eval()
    outputs = []
    for case in cases:
        if should_stop():
            break
        started = time.perf_counter()
        with surface_data_errors():
            loaded = load(case.record())
            image = prepare(dict(loaded))["image"]
        logits = region_logits(net, image[None], window, device)[0]
        predicted = label_map_from_regions(regions_from_logits(logits), label_map).cpu()
        original = loaded["image"][:1]
        if resample_ras_1mm:  # back onto the case's own grid, which the DICOM SEG references
            on_grid = MetaTensor(predicted[None].float(), affine=image.affine)
            predicted = ResampleToMatch(mode="nearest")(on_grid, original)[0]
        labels = np.rint(np.asarray(predicted)).astype(np.uint8)
        nifti, seg = output_paths(out_dir, case.case_id)
        write_nifti(nifti, labels, np.asarray(original.affine, dtype=np.float64))
        reference = case.images[MODALITIES.index(REFERENCE_MODALITY)]
        written = write_dicom_seg(labels, label_map, reference, seg, model_description) if reference.is_dir() else None
        outputs.append(CaseOutput(case.case_id, nifti, written, time.perf_counter() - started))
    return outputs
