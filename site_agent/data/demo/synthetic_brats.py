"""Synthetic BraTS-like demo cases, written as real DICOM series (or BraTS-named NIfTI) plus NIfTI labels.

Each case is a brain-like ellipsoid holding one tumour of nested regions (necrotic core inside an enhancing rim
inside edema) whose contrast differs by modality as in real MRI (the rim is bright only on T1ce, edema is
brightest on FLAIR), so a segmentation network can learn it. Sites differ in scanner gain/offset and tumour size
(non-IID); gain, offset and noise apply inside the head only, the skull-stripped background is 0 everywhere.
Everything derives from (seed, site index, case index), so the same call writes the same files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydicom.uid import generate_uid

from fl_contract.labels import BRATS_2021, LabelMap
from site_agent.data.brats_case import (
    DATALIST_NAME,
    DEFAULT_DICOM_FOLDERS,
    MODALITIES,
    BratsCase,
    discover_cases,
    write_datalist,
)
from site_agent.data.demo.dicom_demo import SeriesIds, write_dicom_series
from site_agent.data.readers.nifti import write_nifti

# Relative signal of (background, brain, edema, enhancing rim, necrotic core) per modality.
_TISSUE_SIGNAL: Mapping[str, tuple[float, ...]] = {
    "t1": (0.0, 0.60, 0.45, 0.50, 0.25),
    "t1ce": (0.0, 0.60, 0.50, 1.00, 0.25),
    "t2": (0.0, 0.45, 0.85, 0.65, 0.95),
    "flair": (0.0, 0.50, 0.95, 0.70, 0.40),
}
_NOISE = 0.03


@dataclass(frozen=True)
class SiteStyle:
    """What makes one synthetic site differ from another: scanner gain/offset, stored-value rescale, tumour size."""

    gain: float
    offset: float
    slope: float
    tumour_radius: float  # outer (edema) radius as a fraction of the brain's smallest semi-axis


def site_style(site_index: int) -> SiteStyle:
    """The documented non-IID recipe: four scanner/cohort profiles, cycled over site indices (1-based)."""
    k = (site_index - 1) % 4
    return SiteStyle(gain=(800.0, 1200.0, 1000.0, 1500.0)[k], offset=(0.0, 50.0, 100.0, 20.0)[k],
                     slope=(1.0, 0.5, 2.0, 0.25)[k], tumour_radius=(0.45, 0.3, 0.55, 0.38)[k])


@dataclass(frozen=True)
class SyntheticCase:
    """One generated case: `stored` (4, X, Y, Z) uint16 as written to DICOM, `image` the values a reader returns."""

    stored: np.ndarray
    slope: float
    intercept: float
    label: np.ndarray  # (X, Y, Z) uint8 in the requested label map
    affine: np.ndarray  # RAS voxel-to-world

    @property
    def image(self) -> np.ndarray:
        return (self.stored.astype(np.float32) * np.float32(self.slope) + np.float32(self.intercept)).astype(np.float32)


def synthetic_case(
    site_index: int,
    case_index: int,
    shape: tuple[int, int, int] = (48, 48, 48),
    seed: int = 0,
    label_map: LabelMap = BRATS_2021,
    spacing: float = 1.0,
) -> SyntheticCase:
    """Generate one case in memory (deterministic in seed, site and case index), on voxels of `spacing` mm."""
    style = site_style(site_index)
    rng = np.random.default_rng([seed, site_index, case_index])
    size = np.asarray(shape, dtype=float)
    grid = np.stack(np.meshgrid(*(np.arange(n, dtype=float) for n in shape), indexing="ij"), axis=-1)
    brain_axes = size * 0.42 * rng.uniform(0.9, 1.0, 3)
    brain = np.sum(((grid - size / 2) / brain_axes) ** 2, axis=-1) <= 1.0
    centre = size / 2 + rng.uniform(-0.35, 0.35, 3) * brain_axes
    stretch = rng.uniform(0.85, 1.15, 3)
    distance = np.sqrt(np.sum(((grid - centre) * stretch) ** 2, axis=-1))
    outer = style.tumour_radius * brain_axes.min() * rng.uniform(0.85, 1.15)
    # tissue: 0 background, 1 brain, 2 edema, 3 enhancing rim, 4 necrotic core
    tissue = brain.astype(np.uint8)
    for index, radius in ((2, outer), (3, 0.7 * outer), (4, 0.45 * outer)):
        tissue[brain & (distance <= radius)] = index
    label = np.select(
        [tissue == 2, tissue == 3, tissue == 4], [LabelMap.EDEMA, label_map.enhancing, LabelMap.NECROSIS], 0
    ).astype(np.uint8)
    bias = 1.0 + 0.1 * (grid[..., 0] / size[0] - 0.5)  # a gentle coil bias field
    intercept = -style.offset
    stored = np.empty((len(MODALITIES), *shape), dtype=np.uint16)
    for c, modality in enumerate(MODALITIES):
        signal = np.asarray(_TISSUE_SIGNAL[modality])[tissue] * bias
        signal += brain * rng.normal(0.0, _NOISE, shape)
        # gain, offset and noise inside the head only; the (skull-stripped) background stays 0, as in real scans
        physical = np.where(brain, style.gain * np.clip(signal, 0.0, None) + style.offset, 0.0)
        stored[c] = np.clip(np.rint((physical - intercept) / style.slope), 0, np.iinfo(np.uint16).max)
    affine = np.array([[-spacing, 0, 0, size[0] / 2], [0, -spacing, 0, size[1] / 2], [0, 0, spacing, -size[2] / 2],
                       [0, 0, 0, 1]])
    return SyntheticCase(stored, style.slope, intercept, label, affine)


def write_brats_site(
    out: Path,
    site_index: int,
    n_cases: int = 4,
    shape: tuple[int, int, int] = (48, 48, 48),
    seed: int = 0,
    layout: Literal["dicom", "nifti"] = "dicom",
    label_map: LabelMap = BRATS_2021,
    spacing: float = 1.0,
    missing: tuple[str, ...] = (),
) -> list[BratsCase]:
    """Write a site's cases (DICOM series folders T1/T1GD/T2/FLAIR, or BraTS-named NIfTI) and `datalist.json`.

    `spacing` (mm) and `missing` (modalities not written) make a site unlike the others, for the data summary's
    tests and demo; a site with `missing` modalities has no complete case, hence no datalist, and returns none."""
    if site_index < 1:
        raise ValueError(f"site index {site_index} must be 1 or more")
    out = Path(out)
    for case_index in range(n_cases):
        case_id = f"Site{site_index}_{case_index:03d}"
        case = synthetic_case(site_index, case_index, shape, seed, label_map, spacing)
        case_dir = out / case_id
        if layout == "dicom":
            study, frame = _uid(seed, case_id, "study"), _uid(seed, case_id, "frame")
            for c, modality in enumerate(MODALITIES):
                if modality in missing:
                    continue
                ids = SeriesIds(study=study, series=_uid(seed, case_id, modality), frame_of_reference=frame,
                                patient_id=case_id)
                write_dicom_series(case_dir / DEFAULT_DICOM_FOLDERS[modality], case.stored[c], case.affine, ids,
                                   description=modality.upper(), slope=case.slope, intercept=case.intercept,
                                   series_number=c + 1)
        elif layout == "nifti":
            for c, modality in enumerate(MODALITIES):
                if modality in missing:
                    continue
                write_nifti(case_dir / f"{case_id}_{modality}.nii.gz", case.image[c], case.affine)
        else:
            raise ValueError(f"unknown layout {layout!r}; use 'dicom' or 'nifti'")
        write_nifti(case_dir / f"{case_id}_seg.nii.gz", case.label, case.affine)
    if missing:
        return []
    cases = discover_cases(out)
    write_datalist(cases, out / DATALIST_NAME, label_map)
    return cases


def _uid(seed: int, case_id: str, part: str) -> str:
    """A UID derived from its inputs, so that the same seed writes byte-identical DICOM files."""
    return generate_uid(entropy_srcs=[str(seed), case_id, part])
