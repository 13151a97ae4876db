"""Each glioma case as a data summary counts it, read by the agent's own readers as a training job with the summary's
parameters reads it (`site_agent.data.brats_case`): which series are there and read, the reference series' grid, the
scanner from the first DICOM series' header, intensities as stored and after the job's normalisation, and the label
map's convention, classes and tumour volumes. A case a training job would refuse is still counted, under its reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import nibabel as nib
import numpy as np
import pydicom
from monai.transforms.intensity.array import NormalizeIntensity

from fl_contract import data_summary as ds
from fl_contract.job_params import DataSummaryParams
from fl_contract.labels import LABEL_MAPS, LabelMap
from site_agent.data.brats_case import (
    MODALITIES,
    REFERENCE_MODALITY,
    GridPolicy,
    case_folders,
    case_inputs,
    check_label,
    fitting_label_maps,
    label_values,
    stack_channels,
)
from site_agent.data.readers.reader import DataError, Image
from site_agent.data.readers.volume_readers import read_volume
from site_agent.summary.observation import Observation

_TRANSFER_SYNTAXES = {
    "1.2.840.10008.1.2": "Implicit VR Little Endian", "1.2.840.10008.1.2.1": "Explicit VR Little Endian",
    "1.2.840.10008.1.2.2": "Explicit VR Big Endian", "1.2.840.10008.1.2.1.99": "Deflated",
    "1.2.840.10008.1.2.4.50": "JPEG Baseline", "1.2.840.10008.1.2.4.57": "JPEG Lossless",
    "1.2.840.10008.1.2.4.70": "JPEG Lossless", "1.2.840.10008.1.2.4.80": "JPEG-LS", "1.2.840.10008.1.2.4.81": "JPEG-LS",
    "1.2.840.10008.1.2.4.90": "JPEG 2000", "1.2.840.10008.1.2.4.91": "JPEG 2000", "1.2.840.10008.1.2.5": "RLE Lossless",
}
_VENDOR_WORDS = (("siemens", "Siemens"), ("ge ", "GE"), ("ge medical", "GE"), ("general electric", "GE"),
                 ("philips", "Philips"), ("canon", "Canon/Toshiba"), ("toshiba", "Canon/Toshiba"),
                 ("hitachi", "Hitachi/Fujifilm"), ("fujifilm", "Hitachi/Fujifilm"),
                 ("united imaging", "United Imaging"), ("uih", "United Imaging"))


def observe_site(folder: Path, job: DataSummaryParams) -> list[Observation]:
    """Every case folder of the site's glioma folder, in folder order."""
    return [observe_case(case_dir, job) for case_dir in case_folders(Path(folder))]


def observe_case(case_dir: Path, job: DataSummaryParams) -> Observation:
    """One case folder, each series and the label read once; the case's status is the first reason a training job would
    refuse it (the same checks, `stack_channels` and `check_label`), or usable."""
    seen = Observation(case_dir.name)
    paths, label_path = case_inputs(case_dir)
    images: dict[str, Image] = {}
    for m in MODALITIES:
        path = paths[m]
        if path is None:
            seen.cells[f"modality/{m}"] = "missing"
            seen.refuse(f"missing {m}", f"{case_dir}: missing modality {m}")
            continue
        try:
            images[m] = read_volume(path)
        except DataError as err:
            seen.cells[f"modality/{m}"] = "unreadable"
            seen.refuse(f"unreadable {m}", str(err))
            continue
        seen.cells[f"modality/{m}"] = "present"
    reference = images.get(REFERENCE_MODALITY) or next(iter(images.values()), None)
    _geometry(seen, reference, job)
    _scanner(seen, next((p for p in paths.values() if p is not None and p.is_dir()), None))
    for m in MODALITIES:
        _intensities(seen, m, images.get(m))
    label = _label(seen, case_dir, label_path, job)
    if "case_status" not in seen.cells and reference is not None and label is not None:
        try:
            stacked = stack_channels(case_dir.name, [images[m] for m in MODALITIES], cast(GridPolicy, job.grid))
        except DataError as err:
            seen.refuse("series off the reference grid", str(err))
        else:
            try:
                check_label(label, case_dir.name, stacked, LABEL_MAPS[job.label_map])
            except DataError as err:
                seen.refuse("label not usable with the job's label_map", str(err))
    seen.cells.setdefault("case_status", ds.USABLE)
    return seen


def _geometry(seen: Observation, image: Image | None, job: DataSummaryParams) -> None:
    """Voxel size, shape and axis codes of the reference series, and whether the network's crop fits in it (in the
    1 mm RAS space the job resamples to, with resample_ras_1mm)."""
    if image is None:
        for a in ds.AXES:
            seen.cells[f"spacing_mm/{a}"] = seen.cells[f"shape/{a}"] = ds.NA
        seen.cells["orientation"] = seen.cells["roi_fit"] = ds.NA
        return
    affine = np.asarray(image.affine, dtype=float)
    spacing = np.linalg.norm(affine[:3, :3], axis=0)
    shape = np.asarray(image.spatial_shape, dtype=float)
    for a, s, n in zip(ds.AXES, spacing, shape):
        seen.cells[f"spacing_mm/{a}"] = ds.bin_of(float(s), ds.SPACING_EDGES, "mm")
        seen.cells[f"shape/{a}"] = ds.bin_of(float(n), ds.SHAPE_EDGES, "voxels")
    seen.cells["orientation"] = "".join(nib.orientations.aff2axcodes(affine))  # type: ignore[no-untyped-call]
    seen_by_network = np.abs(affine[:3, :3]) @ shape if job.resample_ras_1mm else shape
    fits = all(n >= r for n, r in zip(seen_by_network, job.roi_size))
    seen.cells["roi_fit"] = "fits roi_size" if fits else "smaller than roi_size"


def _scanner(seen: Observation, series: Path | None) -> None:
    """Vendor, model, field strength, slice thickness and transfer syntax from the first slice file's header."""
    header = _first_header(series) if series is not None else None
    if header is None:
        value = ds.NOT_DICOM if series is None else ds.NOT_RECORDED
        for name in ("manufacturer", "model", "field_strength", "slice_thickness_mm"):
            seen.cells[name] = value
        seen.cells["transfer_syntax"] = ds.NOT_DICOM if series is None else "other"
        return
    vendor = str(header.get("Manufacturer", "") or "").strip()
    seen.cells["manufacturer"] = _vendor(vendor) if vendor else ds.NOT_RECORDED
    seen.cells["model"] = str(header.get("ManufacturerModelName", "") or "").strip() or ds.NOT_RECORDED
    seen.cells["field_strength"] = _binned(header.get("MagneticFieldStrength"), ds.FIELD_EDGES, "T")
    seen.cells["slice_thickness_mm"] = _binned(header.get("SliceThickness"), ds.THICKNESS_EDGES, "mm")
    uid = str(getattr(getattr(header, "file_meta", None), "TransferSyntaxUID", "") or "")
    seen.cells["transfer_syntax"] = _TRANSFER_SYNTAXES.get(uid, "other")


def _first_header(folder: Path) -> pydicom.Dataset | None:
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            return pydicom.dcmread(path, stop_before_pixels=True)
        except (pydicom.errors.InvalidDicomError, OSError):
            continue
    return None


def _vendor(text: str) -> str:
    lowered = f"{text.lower()} "
    return next((vendor for word, vendor in _VENDOR_WORDS if lowered.startswith(word) or f" {word}" in lowered),
                "other")


def _binned(value: object, edges: tuple[float, ...], unit: str) -> str:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ds.NOT_RECORDED
    return ds.bin_of(number, edges, unit) if np.isfinite(number) else ds.NOT_RECORDED


def _intensities(seen: Observation, modality: str, image: Image | None) -> None:
    """The series' brain (non-zero) voxels: log10 of their 99th percentile as stored (a cell), their percentiles as
    stored and after the job's per-channel z-score over non-zero voxels (MONAI's NormalizeIntensity)."""
    if image is None:
        seen.cells[f"intensity_p99/{modality}"] = ds.NA
        return
    voxels = image.array[image.array != 0]
    if voxels.size == 0:
        seen.cells[f"intensity_p99/{modality}"] = ds.bin_of(-np.inf, ds.LOG_INTENSITY_EDGES, "log10")
        return
    p99 = float(np.percentile(voxels, 99))
    seen.cells[f"intensity_p99/{modality}"] = ds.bin_of(np.log10(p99) if p99 > 0 else -np.inf,
                                                        ds.LOG_INTENSITY_EDGES, "log10")
    seen.values[f"raw_intensity/{modality}"] = np.percentile(voxels, ds.VOXEL_QUANTILES)
    normalised = np.asarray(NormalizeIntensity(nonzero=True)(image.array))
    seen.values[f"intensity/{modality}"] = np.percentile(normalised[image.array != 0], ds.VOXEL_QUANTILES)


def _label(seen: Observation, case_dir: Path, path: Path | None, job: DataSummaryParams) -> Image | None:
    """The label's convention, classes and tumour volumes (in the job's map where the values fit it)."""
    regions = [f"tumour_ml/{r}" for r in ("TC", "WT", "ET")]
    if path is None:
        for name in ("label_map_fit", "label_classes", *regions):
            seen.cells[name] = "no label"
        seen.refuse("missing label", f"{case_dir}: missing label")
        return None
    try:
        label = read_volume(path)
    except DataError as err:
        for name in ("label_map_fit", "label_classes", *regions):
            seen.cells[name] = ds.NA
        seen.refuse("unreadable label", str(err))
        return None
    values = [v for v in label_values(label) if v != 0]
    fitting = fitting_label_maps(values)
    names = {m.name for m in fitting}
    seen.cells["label_map_fit"] = ("either (no enhancing voxel)" if len(names) > 1 else f"{names.pop()} only"
                                   if names else "no known map")
    tumour = set(values)
    seen.cells["label_classes"] = (",".join(str(v) for v in sorted(tumour)) or "0 only (empty)"
                                   if tumour <= set(ds.TUMOUR_VALUES) else "other values")
    chosen = LABEL_MAPS[job.label_map] if LABEL_MAPS[job.label_map] in fitting else next(iter(fitting), None)
    _volumes(seen, label, chosen)
    return label


def _volumes(seen: Observation, label: Image, label_map: LabelMap | None) -> None:
    if label_map is None:
        for r in ("TC", "WT", "ET"):
            seen.cells[f"tumour_ml/{r}"] = ds.NA
        return
    voxel_ml = abs(float(np.linalg.det(np.asarray(label.affine)[:3, :3]))) / 1000.0
    values = label.array
    regions = {"TC": (LabelMap.NECROSIS, label_map.enhancing),
               "WT": (LabelMap.NECROSIS, LabelMap.EDEMA, label_map.enhancing), "ET": (label_map.enhancing,)}
    for region, members in regions.items():
        millilitres = float(np.isin(values, members).sum()) * voxel_ml
        seen.cells[f"tumour_ml/{region}"] = ds.tumour_cell(millilitres)
        seen.values[f"tumour_ml/{region}"] = millilitres
