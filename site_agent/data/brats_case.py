"""Glioblastoma MRI cases: discovery in both hospital layouts, validated reading, datalist JSON, MONAI pipeline.

A case is four co-registered structural series plus, for training, a label volume:

- DICOM layout (FeTS): `CASE/{T1,T1GD,T2,FLAIR}/*.dcm` (folder names configurable) and `CASE/*_seg.nii.gz`;
- NIfTI layout (BraTS): `CASE/*_t1.nii.gz`, `*_t1ce.nii.gz`, `*_t2.nii.gz`, `*_flair.nii.gz`, `*_seg.nii.gz`.

Channels are always stacked in `MODALITIES` order, and labels become the TC, WT, ET channels MONAI's BraTS
recipes train on. Grids are checked against the reference modality; the label is never resampled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from monai.data.meta_tensor import MetaTensor
from monai.transforms.compose import Compose
from monai.transforms.spatial.array import ResampleToMatch
from monai.transforms.transform import MapTransform
from monai.transforms.utility.dictionary import CastToTyped, ConvertToMultiChannelBasedOnBratsClassesd

from fl_contract.labels import BRATS_2021, LABEL_MAPS, REGIONS, LabelMap
from site_agent.data.pipeline import SiteCacheDataset, SitePersistentDataset
from site_agent.data.readers.nifti import NIFTI_SUFFIXES
from site_agent.data.readers.reader import DataError, Image, refuse_broken_link
from site_agent.data.readers.volume_readers import read_volume

MODALITIES = ("t1", "t1ce", "t2", "flair")
"""Channel order of every stacked case: T1, T1 post-contrast, T2, FLAIR."""
REFERENCE_MODALITY = "t1ce"
"""The grid every other series (and the label) must match, or is resampled onto with grid="resample"."""
DEFAULT_DICOM_FOLDERS: Mapping[str, str] = {"t1": "T1", "t1ce": "T1GD", "t2": "T2", "flair": "FLAIR"}
LABEL_SUFFIX = "_seg"
DATALIST_NAME = "datalist.json"
"""Where a site's decathlon-style datalist lies in its glioma folder (written by the demo data; optional)."""

GridPolicy = Literal["refuse", "resample"]
_GRID_ATOL_MM = 1e-3


@dataclass(frozen=True)
class BratsCase:
    """One case's inputs: `images` in `MODALITIES` order (DICOM series folders or NIfTI files), optional label."""

    case_id: str
    images: tuple[Path, ...]
    label: Path | None = None

    def record(self) -> dict[str, Any]:
        """The case as a MONAI / decathlon datalist entry (string paths)."""
        entry: dict[str, Any] = {"case_id": self.case_id, "image": [str(p) for p in self.images]}
        if self.label is not None:
            entry["label"] = str(self.label)
        return entry

    @classmethod
    def from_record(cls, entry: Mapping[str, Any]) -> BratsCase:
        label = entry.get("label")
        images = entry["image"]
        case_id = entry.get("case_id") or Path(images[0]).parent.name
        return cls(case_id, tuple(Path(p) for p in images), Path(label) if label else None)


def discover_cases(
    folder: Path,
    dicom_folders: Mapping[str, str] = DEFAULT_DICOM_FOLDERS,
    require_labels: bool = True,
) -> list[BratsCase]:
    """Every sub-folder of `folder` is one case, in either layout; a case missing anything raises `DataError`."""
    return [discover_case(case_dir, dicom_folders, require_labels) for case_dir in case_folders(folder)]


def case_folders(folder: Path) -> list[Path]:
    """The case folders of a site's glioma folder (every visible sub-folder), refusing a folder without any."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; point the site config at the folder holding one sub-folder per case")
    case_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not case_dirs:
        raise DataError(f"{folder}: no case folders; expected one sub-folder per case (see docs/site-data.md)")
    return case_dirs


def discover_case(
    case_dir: Path, dicom_folders: Mapping[str, str] = DEFAULT_DICOM_FOLDERS, require_labels: bool = True
) -> BratsCase:
    """One case folder in either layout; anything missing raises a `DataError` naming the case and what it lacks."""
    layouts = (
        f"DICOM series folders {'/'.join(dicom_folders[m] for m in MODALITIES)}/ "
        f"or NIfTI files *_{{{','.join(MODALITIES)}}}.nii.gz"
    )
    found, label = case_inputs(case_dir, dicom_folders)
    dicom = any((case_dir / dicom_folders[m]).is_dir() for m in MODALITIES)
    for modality, path in found.items():
        if path is None:
            expected = (
                f"the DICOM series folder {dicom_folders[modality]}/" if dicom else f"a file named *_{modality}.nii.gz"
            )
            raise DataError(f"{case_dir}: missing modality {modality}: expected {expected} (a case holds {layouts})")
    if label is None and require_labels:
        raise DataError(f"{case_dir}: missing label: expected a file named *{LABEL_SUFFIX}.nii.gz "
                        "(or pass require_labels=False)")
    return BratsCase(case_dir.name, tuple(p for p in found.values() if p is not None), label)


def case_inputs(
    case_dir: Path, dicom_folders: Mapping[str, str] = DEFAULT_DICOM_FOLDERS
) -> tuple[dict[str, Path | None], Path | None]:
    """Where each modality of a case folder lies (None: not there) and its label file (None: none), by the rules
    `discover_case` applies: DICOM series folders when any is present, BraTS-named NIfTI files otherwise. For
    whoever must describe an incomplete case rather than refuse it (`site_agent.summary`)."""
    for modality in MODALITIES:
        refuse_broken_link(case_dir / dicom_folders[modality], "series folder")
    dicom = any((case_dir / dicom_folders[m]).is_dir() for m in MODALITIES)
    found: dict[str, Path | None] = {}
    for modality in MODALITIES:
        path = case_dir / dicom_folders[modality] if dicom else _one_file(case_dir, f"_{modality}")
        found[modality] = path if path is not None and path.exists() else None
    return found, _one_file(case_dir, LABEL_SUFFIX)


def _one_file(case_dir: Path, stem_suffix: str) -> Path | None:
    names = tuple(stem_suffix + s for s in NIFTI_SUFFIXES)
    candidates = sorted(p for p in case_dir.iterdir() if p.name.endswith(names))
    for path in candidates:
        refuse_broken_link(path, "NIfTI file")
    found = [p for p in candidates if p.is_file()]
    if len(found) > 1:
        raise DataError(f"{case_dir}: several *{stem_suffix}.nii[.gz] files: {[p.name for p in found]}; "
                        "keep exactly one")
    return found[0] if found else None


def read_case(
    case: BratsCase, label_map: LabelMap | None = BRATS_2021, grid: GridPolicy = "refuse"
) -> tuple[Image, Image | None]:
    """The (4, X, Y, Z) float32 image in `MODALITIES` order and the (1, X, Y, Z) raw label, both validated.

    Series off the reference grid are refused (`grid="refuse"`) or resampled onto it with MONAI
    (`grid="resample"`, trilinear). The label must lie on the reference grid and use only `label_map` values
    (`label_map=None`: only values of some known map, for `site-agent check`, which cannot know the job's map).
    """
    if len(case.images) != len(MODALITIES):
        raise DataError(f"case {case.case_id}: {len(case.images)} images, "
                        f"expected {len(MODALITIES)} ({', '.join(MODALITIES)})")
    stacked = stack_channels(case.case_id, [read_volume(path) for path in case.images], grid)
    if case.label is None:
        return stacked, None
    return stacked, check_label(read_volume(case.label), case.case_id, stacked, label_map)


def stack_channels(case_id: str, images: Sequence[Image], grid: GridPolicy) -> Image:
    """A case's decoded series (in `MODALITIES` order) as one (4, X, Y, Z) image on the reference grid: a series off
    it is refused or resampled, as `read_case` does."""
    if grid not in ("refuse", "resample"):
        raise ValueError(f"grid={grid!r}: use 'refuse' or 'resample'")
    reference = images[MODALITIES.index(REFERENCE_MODALITY)]
    channels = []
    for modality, image in zip(MODALITIES, images):
        if not _same_grid(image, reference):
            if grid == "refuse":
                raise DataError(
                    f"case {case_id}: {modality} ({image.source}) is on grid {image.spatial_shape}, affine "
                    f"{_brief(image.affine)}, not the {REFERENCE_MODALITY} grid {reference.spatial_shape}, "
                    f"{_brief(reference.affine)}; co-register the series or read with grid='resample'"
                )
            image = _resample(image, reference)
        channels.append(image.array)
    return Image(np.concatenate(channels, axis=0), reference.affine, reference.source.parent)


def check_label(label: Image, case_id: str, reference: Image, label_map: LabelMap | None) -> Image:
    """A decoded label, used as given, never resampled: one on another grid, or with values outside the job's label
    map, would silently train the wrong regions, so each mismatch is refused with what to fix."""
    path = label.source
    if label.spatial_shape != reference.spatial_shape:
        raise DataError(
            f"{path}: label shape {label.spatial_shape} does not match the image shape {reference.spatial_shape} "
            f"of case {case_id}; the segmentation belongs to another image or was cropped"
        )
    if not _same_grid(label, reference):
        raise DataError(
            f"{path}: label affine {_brief(label.affine)} differs from the {REFERENCE_MODALITY} affine "
            f"{_brief(reference.affine)}; labels are never resampled, re-export the segmentation on the image grid"
        )
    found = label_values(label)
    fitting = fitting_label_maps(found)
    if label_map is None and not fitting:
        maps = ", ".join(f"{m.name} {sorted(m.values)}" for m in LABEL_MAPS.values())
        raise DataError(f"{path}: label values {found} fit no known label map ({maps}); fix the segmentation")
    if label_map is not None and label_map not in fitting:
        hint = f"the values fit label_map={fitting[0].name!r}" if fitting else "fix the segmentation"
        raise DataError(
            f"{path}: label values {sorted(set(found) - label_map.values)} are not in the {label_map.name} map "
            f"{sorted(label_map.values)} (values found: {found}); {hint}"
        )
    return label


def label_values(label: Image) -> list[int | float]:
    """The distinct values of a label volume, integers where they are whole."""
    return [int(v) if float(v).is_integer() else float(v) for v in np.unique(label.array)]


def fitting_label_maps(values: Iterable[int | float]) -> list[LabelMap]:
    """The known label maps (`fl_contract.labels.LABEL_MAPS`) that hold every one of `values`."""
    found = set(values)
    return [m for m in LABEL_MAPS.values() if found <= m.values]


def _same_grid(a: Image, b: Image) -> bool:
    return a.spatial_shape == b.spatial_shape and np.allclose(a.affine, b.affine, atol=_GRID_ATOL_MM)


def _resample(image: Image, reference: Image) -> Image:
    source = MetaTensor(torch.from_numpy(np.ascontiguousarray(image.array)), affine=torch.from_numpy(image.affine))
    target = MetaTensor(torch.zeros((1, *reference.spatial_shape)), affine=torch.from_numpy(reference.affine))
    resampled = ResampleToMatch(mode="bilinear", padding_mode="zeros")(source, target)
    return Image(np.asarray(resampled.numpy(), dtype=np.float32), reference.affine, image.source)


def _brief(affine: np.ndarray) -> str:
    return np.array2string(np.asarray(affine)[:3], precision=3, suppress_small=True).replace("\n", "")


def write_datalist(cases: Sequence[BratsCase], path: Path, label_map: LabelMap = BRATS_2021) -> Path:
    """Write a decathlon-style datalist JSON (MSD `dataset.json` keys), paths relative to its folder."""
    path = Path(path)
    base = path.parent.resolve()

    def rel(p: Path) -> str:
        p = Path(p).resolve()
        return str(p.relative_to(base)) if p.is_relative_to(base) else str(p)

    training = []
    for case in cases:
        entry = case.record()
        entry["image"] = [rel(p) for p in case.images]
        if case.label is not None:
            entry["label"] = rel(case.label)
        training.append(entry)
    labels = {"0": "background", str(LabelMap.NECROSIS): "necrotic / non-enhancing tumour core",
              str(LabelMap.EDEMA): "peritumoral edema", str(label_map.enhancing): "enhancing tumour"}
    content = {
        "name": "site glioma MRI",
        "modality": {str(i): m for i, m in enumerate(MODALITIES)},
        "labels": labels,
        "label_map": label_map.name,
        "label_channels": list(REGIONS),
        "numTraining": len(training),
        "training": training,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2) + "\n")
    return path


def read_datalist(path: Path) -> list[BratsCase]:
    """The cases of a datalist JSON written by `write_datalist` (relative paths resolved against its folder)."""
    path = Path(path)
    try:
        records = [BratsCase.from_record(entry) for entry in json.loads(path.read_text())["training"]]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise DataError(
            f"{path}: not a readable datalist with a 'training' list of cases ({err!r}); "
            "regenerate it with write_datalist"
        ) from err
    base = path.parent
    return [
        BratsCase(case.case_id, tuple(base / p for p in case.images), None if case.label is None else base / case.label)
        for case in records
    ]


class LoadBratsCased(MapTransform):
    """MONAI dictionary transform: a datalist entry -> {"image": (4, X, Y, Z), "label": (1, X, Y, Z) raw}
    MetaTensors."""

    def __init__(self, label_map: LabelMap = BRATS_2021, grid: GridPolicy = "refuse") -> None:
        super().__init__(keys=("image", "label"), allow_missing_keys=True)
        self.label_map = label_map
        self.grid = grid

    def __call__(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(data)
        image, label = read_case(BratsCase.from_record(data), self.label_map, self.grid)
        out["image"] = _meta_tensor(image)
        if label is not None:
            out["label"] = _meta_tensor(label)
        return out


def _meta_tensor(image: Image) -> MetaTensor:
    meta = {"filename_or_obj": str(image.source)}
    return MetaTensor(torch.from_numpy(np.ascontiguousarray(image.array)), affine=torch.from_numpy(image.affine),
                      meta=meta)


def brats_transforms(
    label_map: LabelMap = BRATS_2021, grid: GridPolicy = "refuse", extra: Sequence[Callable[..., Any]] = ()
) -> Compose:
    """Load + validate, labels to float32 TC/WT/ET channels, then the job's own transforms (`extra`)."""
    return Compose(
        [
            LoadBratsCased(label_map, grid),
            ConvertToMultiChannelBasedOnBratsClassesd("label", et_label=label_map.enhancing, allow_missing_keys=True),
            CastToTyped("label", dtype=torch.float32, allow_missing_keys=True),
            *extra,
        ]
    )


def brats_dataset(
    cases: Sequence[BratsCase],
    label_map: LabelMap = BRATS_2021,
    grid: GridPolicy = "refuse",
    extra: Sequence[Callable[..., Any]] = (),
    cache_rate: float = 1.0,
    cache_dir: Path | None = None,
) -> SiteCacheDataset | SitePersistentDataset:
    """A MONAI dataset of {"case_id", "image": (4, X, Y, Z), "label": (3, X, Y, Z)} dicts.

    Reading and decoding DICOM dominates an epoch, so the deterministic prefix (everything up to the first
    random transform in `extra`) is cached: in memory for `cache_rate` of the cases (0 disables caching), or, with
    `cache_dir`, on disk for every case (one file per case, named by a hash of its record, which carries the size
    and modification time of every source file, so a re-exported case is read again). Either way the cache is
    filled here, so a bad case raises its `DataError` here (or, beyond `cache_rate`, when a loader reaches it).
    `cache_dir` must be specific to the transforms: MONAI's file names hash the record, not the transforms.
    """
    transform = brats_transforms(label_map, grid, extra)
    if cache_dir is None:
        return SiteCacheDataset([case.record() for case in cases], transform=transform, cache_rate=cache_rate,
                                num_workers=None, progress=False)
    Path(cache_dir).mkdir(mode=0o700, parents=True, exist_ok=True)  # decoded patient volumes: the service account only
    records = [{**case.record(), "source_stamp": source_stamp(case)} for case in cases]
    dataset = SitePersistentDataset(records, transform=transform, cache_dir=cache_dir, track_meta=True)
    dataset.fill()
    return dataset


def source_stamp(case: BratsCase) -> str:
    """Name, size and modification time of every file of `case` (series folders listed): changes when any does."""
    files = []
    for source in (*case.images, *(() if case.label is None else (case.label,))):
        files += sorted(p for p in Path(source).iterdir() if p.is_file()) if Path(source).is_dir() else [Path(source)]
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()
