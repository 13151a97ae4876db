"""ISIC-2019 dermoscopy sites, the dataset contract of the classification jobs: records, and their MONAI pipeline.

Records: a site folder holds `ISIC_2019_Training_GroundTruth.csv`, optionally `ISIC_2019_Training_Metadata.csv`, and
the images `ISIC_<7 digits>[_downsampled].jpg`, either in `ISIC_2019_Training_Input/` or beside the CSVs.
Rows that cannot be used (missing or undecodable image, no or several labels) raise one `DataError` listing
them, or, with `on_error="skip"`, are skipped and counted in the log: never dropped silently. Split them with
`site_agent.data.split.split_records`. Pipeline: `isic_dataset` decodes each record lazily through MONAI
dictionary transforms into a (3, S, S) float32 image in [0, 1] and its class index.
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from monai.transforms import Compose, EnsureTyped, MapTransform, Resized, ScaleIntensityRanged
from PIL import Image as PILImage

from fl_contract.classes import ISIC_CLASSES, TRAINING_CLASSES
from site_agent.data.pipeline import SiteDataset
from site_agent.data.reader import DataError, Image

log = logging.getLogger(__name__)

GROUND_TRUTH_CSV = "ISIC_2019_Training_GroundTruth.csv"
METADATA_CSV = "ISIC_2019_Training_Metadata.csv"
METADATA_COLUMNS = ("image", "age_approx", "anatom_site_general", "lesion_id", "sex")
IMAGE_FOLDER = "ISIC_2019_Training_Input"
FLAMBY_CENTERS = ("BCN", "HAM_vidir_molemax", "HAM_vidir_modern", "HAM_rosendahl", "MSK", "HAM_vienna_dias")
"""FLamby's Fed-ISIC2019 centres, in its centre-index order."""
_FLAMBY_PREFIXES = {"BCN_": 0, "MSK4": 4}
_EXAMPLES_SHOWN = 5


@dataclass(frozen=True)
class IsicRecord:
    """One usable image: `label` indexes the chosen class subset; `lesion_id` comes from the metadata CSV."""

    image: str
    path: Path
    label: int
    diagnosis: str
    lesion_id: str | None = None

    def record(self) -> dict[str, Any]:
        """The image as a MONAI datalist entry: what `LoadIsicd` reads and the class index."""
        return {"image": str(self.path), "label": self.label}


def read_isic_site(
    folder: Path,
    classes: Sequence[str] = TRAINING_CLASSES,
    on_error: Literal["raise", "skip"] = "raise",
    check_images: bool = False,
) -> list[IsicRecord]:
    """The site's usable images, in CSV order, labelled by index into `classes`.

    Rows of classes outside `classes` are left out and counted in the log. `check_images` decodes every image
    up front, so an undecodable file fails here rather than in the middle of training.
    """
    folder = Path(folder)
    unknown = sorted(set(classes) - set(ISIC_CLASSES))
    if unknown or not classes:
        raise DataError(f"class subset {list(classes)}: unknown classes {unknown}; choose from {list(ISIC_CLASSES)}")
    truth = folder / GROUND_TRUTH_CSV
    rows = _read_csv(truth, ("image", *ISIC_CLASSES))
    lesions = _read_lesion_ids(folder / METADATA_CSV)
    images = folder / IMAGE_FOLDER if (folder / IMAGE_FOLDER).is_dir() else folder
    reader = IsicImageReader()
    records, problems, other_classes, seen = [], [], Counter(), set()
    for line, row in rows:
        name = row["image"]
        if name in seen:
            raise DataError(f"{truth}, line {line}: image {name} listed twice; keep one row per image")
        seen.add(name)
        diagnoses = _diagnoses(truth, line, row)
        if len(diagnoses) != 1:
            problems.append((line, name, "no label" if not diagnoses else f"several labels {diagnoses}"))
            continue
        if diagnoses[0] not in classes:
            other_classes[diagnoses[0]] += 1
            continue
        path = _image_path(images, name)
        if path is None:
            problems.append((line, name, f"image missing (looked for {images / (name + '.jpg')})"))
            continue
        if check_images:
            try:
                reader.read(path)
            except DataError as err:
                problems.append((line, name, str(err)))
                continue
        records.append(IsicRecord(name, path, list(classes).index(diagnoses[0]), diagnoses[0], lesions.get(name)))
    _report(truth, len(rows), problems, other_classes, on_error)
    return records


def _read_csv(path: Path, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    if not path.is_file():
        raise DataError(f"{path}: file not found; the site's ISIC folder must hold {path.name} in the official format")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path}: missing columns {missing} (header {reader.fieldnames}); use the official ISIC 2019 header")
        return [(reader.line_num, row) for row in reader]


def _read_lesion_ids(path: Path) -> dict[str, str | None]:
    if not path.exists():
        return {}
    return {row["image"]: row["lesion_id"] or None for _, row in _read_csv(path, METADATA_COLUMNS)}


def _diagnoses(path: Path, line: int, row: dict[str, str]) -> list[str]:
    found = []
    for name in ISIC_CLASSES:
        try:
            value = float(row[name])
        except (TypeError, ValueError):
            raise DataError(f"{path}, line {line}: column {name} is {row[name]!r}, expected 0.0 or 1.0") from None
        if value not in (0.0, 1.0):
            raise DataError(f"{path}, line {line}: column {name} is {row[name]!r}, expected 0.0 or 1.0 (one-hot)")
        if value == 1.0:
            found.append(name)
    return found


def _image_path(images: Path, name: str) -> Path | None:
    for candidate in (images / f"{name}.jpg", images / f"{name}_downsampled.jpg"):
        if candidate.is_file():
            return candidate
    return None


def _report(truth: Path, n_rows: int, problems: list[tuple[int, str, str]], other: Counter, on_error: str) -> None:
    if other:
        log.info("%s: left out %d rows of classes outside the subset (%s)", truth, sum(other.values()), dict(other))
    if not problems:
        return
    examples = "; ".join(f"line {line} {name}: {what}" for line, name, what in problems[:_EXAMPLES_SHOWN])
    more = f" and {len(problems) - _EXAMPLES_SHOWN} more" if len(problems) > _EXAMPLES_SHOWN else ""
    if on_error == "raise":
        raise DataError(
            f"{truth}: {len(problems)} of {n_rows} rows cannot be used: {examples}{more}. Fix the rows or images, "
            "or read with on_error='skip' to skip them (the count is logged)"
        )
    log.warning("%s: skipped %d of %d rows that cannot be used: %s%s", truth, len(problems), n_rows, examples, more)


class IsicImageReader:
    """`ImageReader` for dermoscopy photos: (3, H, W) float32 RGB as stored (0-255); the pipeline resizes and scales."""

    def can_read(self, path: Path) -> bool:
        return Path(path).suffix.lower() in {".jpg", ".jpeg", ".png"}

    def read(self, path: Path) -> Image:
        try:
            with PILImage.open(path) as photo:
                array = np.asarray(photo.convert("RGB"), dtype=np.float32)
        except (OSError, ValueError) as err:
            raise DataError(f"{path}: image does not decode ({err}); replace the file or remove its CSV row") from err
        return Image(np.ascontiguousarray(array.transpose(2, 0, 1)), np.eye(3), Path(path))


class LoadIsicd(MapTransform):
    """MONAI dictionary transform: the record's image path under "image" -> its (3, H, W) float32 RGB (0-255)."""

    def __init__(self) -> None:
        super().__init__(keys="image")
        self.reader = IsicImageReader()

    def __call__(self, data: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(data)
        for key in self.key_iterator(out):
            out[key] = self.reader.read(Path(out[key])).array
        return out


def isic_transforms(image_size: int, extra: Sequence[Callable] = ()) -> Compose:
    """Decode, resize to `image_size` x `image_size`, scale 0-255 to [0, 1], plain tensors (no MONAI metadata),
    then the job's own transforms (`extra`).

    MONAI's Resize has no antialiased bilinear mode (PIL's, used before); "area" (a box filter when shrinking) is
    as fast and stays within about 0.005 mean absolute difference of it, where bilinear without antialiasing
    aliases. Images already at `image_size` pass through unchanged: their values are the stored pixels / 255.
    """
    return Compose(
        [
            LoadIsicd(),
            Resized("image", spatial_size=(image_size, image_size), mode="area"),
            ScaleIntensityRanged("image", a_min=0.0, a_max=255.0, b_min=0.0, b_max=1.0),
            EnsureTyped(("image", "label"), track_meta=False),
            *extra,
        ]
    )


def isic_dataset(records: Sequence[IsicRecord], image_size: int) -> SiteDataset:
    """A MONAI dataset of {"image": (3, S, S) float32 in [0, 1], "label": int64} dicts, decoded on access so that
    large sites need not fit in memory; an image that does not decode raises the `DataError` naming it."""
    return SiteDataset([record.record() for record in records], isic_transforms(image_size))


def flamby_center(lesion_id: str | None, ham_source: str | None = None) -> int:
    """FLamby's Fed-ISIC2019 centre index (see `FLAMBY_CENTERS`), for research splits of the pooled data set.

    FLamby derives the centre from the `lesion_id` prefix (BCN_, HAM_, MSK4) and splits HAM images further by
    the `dataset` column of the HAM10000 metadata, passed here as `ham_source` (e.g. "vidir_molemax"). FLamby
    leaves out images without a lesion_id; so must the caller (this raises for them).
    """
    if not lesion_id:
        raise DataError("no lesion_id: FLamby assigns no centre to such images; leave them out of the split")
    if lesion_id.startswith("HAM_"):
        centre = f"HAM_{ham_source}"
        if centre not in FLAMBY_CENTERS:
            raise DataError(
                f"lesion_id {lesion_id}: HAM image with source {ham_source!r}; pass the `dataset` column of the "
                f"HAM10000 metadata, one of {[c[4:] for c in FLAMBY_CENTERS if c.startswith('HAM_')]}"
            )
        return FLAMBY_CENTERS.index(centre)
    for prefix, index in _FLAMBY_PREFIXES.items():
        if lesion_id.startswith(prefix):
            return index
    raise DataError(f"lesion_id {lesion_id}: unknown prefix; FLamby centres come from BCN_, HAM_ or MSK4 lesion ids")
