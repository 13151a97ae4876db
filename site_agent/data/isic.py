"""ISIC-2019 dermoscopy sites, the dataset contract of the classification jobs: records, and their MONAI pipeline.

Records: a site folder holds `ISIC_2019_Training_GroundTruth.csv`, optionally `ISIC_2019_Training_Metadata.csv`, and
the images `ISIC_<7 digits>[_downsampled].jpg`, either in `ISIC_2019_Training_Input/` or beside the CSVs.
Rows that cannot be used (missing or undecodable image, no or several labels) raise one `DataError` listing
them, or, with `on_error="skip"`, are skipped and counted in the log: never dropped silently. Split them with
`site_agent.data.split.split_records`. Pipeline: `isic_dataset` decodes each record lazily through MONAI
dictionary transforms into a (3, S, S) float32 image in [0, 1] and its class index.
"""

from __future__ import annotations

import codecs
import csv
import io
import logging
import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from monai.transforms.compose import Compose
from monai.transforms.intensity.dictionary import ScaleIntensityRanged
from monai.transforms.spatial.dictionary import Resized
from monai.transforms.transform import MapTransform
from monai.transforms.utility.dictionary import EnsureTyped
from PIL import Image as PILImage

from fl_contract.classes import ISIC_CLASSES, TRAINING_CLASSES
from site_agent.data.pipeline import SiteDataset
from site_agent.data.readers.reader import DataError, Image, os_error, refuse_broken_link

log = logging.getLogger(__name__)

GROUND_TRUTH_CSV = "ISIC_2019_Training_GroundTruth.csv"
METADATA_CSV = "ISIC_2019_Training_Metadata.csv"
METADATA_COLUMNS = ("image", "age_approx", "anatom_site_general", "lesion_id", "sex")
IMAGE_FOLDER = "ISIC_2019_Training_Input"
FLAMBY_CENTERS = ("BCN", "HAM_vidir_molemax", "HAM_vidir_modern", "HAM_rosendahl", "MSK", "HAM_vienna_dias")
"""FLamby's Fed-ISIC2019 centres, in its centre-index order."""
_FLAMBY_PREFIXES = {"BCN_": 0, "MSK4": 4}
MAX_IMAGE_PIXELS = 50_000_000
MIN_IMAGE_SIDE = 16
"""Photos with a side below this many pixels are refused: nothing of a lesion is left to see, and resizing would
only invent it (ISIC images are hundreds of pixels a side; the demo writes 24 and up)."""
"""Larger images are refused unread: a 50-megapixel photo already takes 600 MB as float32 RGB."""
_EXAMPLES_SHOWN = 5
_DELIMITERS = ",;\t"


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


class RowProblem(NamedTuple):
    """A ground-truth CSV row that cannot be used: its line, its image name, and why."""

    line: int
    image: str
    reason: str


@dataclass(frozen=True)
class IsicScan:
    """What a site's ground-truth CSV holds: the usable records (CSV order), the rows that cannot be used, and the
    rows of classes outside the chosen subset, counted by class."""

    csv: Path
    rows: int
    records: list[IsicRecord]
    problems: list[RowProblem]
    other_classes: Counter[str]


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
    scan = scan_isic_site(folder, classes, check_images)
    _report(scan, on_error)
    return scan.records


def scan_isic_site(folder: Path, classes: Sequence[str] = TRAINING_CLASSES, check_images: bool = False) -> IsicScan:
    """Every row of the site's ground-truth CSV sorted into usable records, problems and other classes, without
    deciding what a problem means (`read_isic_site` raises or skips; `site-agent check` lists them all).

    A CSV that cannot be read as a whole (missing, wrong header, undecodable text) raises `DataError`.
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
    scan = IsicScan(truth, len(rows), [], [], Counter())
    first_line: dict[str, int] = {}
    for line, row in rows:
        name = row["image"]
        if name in first_line:
            scan.problems.append(
                RowProblem(line, name, f"listed twice (first on line {first_line[name]}); keep one row")
            )
            continue
        first_line[name] = line
        try:
            diagnosis = _diagnosis(row)
        except ValueError as err:
            scan.problems.append(RowProblem(line, name, str(err)))
            continue
        if diagnosis not in classes:
            scan.other_classes[diagnosis] += 1
            continue
        path = _image_path(images, name)
        if path is None:
            scan.problems.append(RowProblem(line, name, f"image missing (looked for {images / (name + '.jpg')})"))
            continue
        if check_images:
            try:
                reader.read(path)
            except DataError as err:
                scan.problems.append(RowProblem(line, name, str(err)))
                continue
        scan.records.append(IsicRecord(name, path, list(classes).index(diagnosis), diagnosis, lesions.get(name)))
    return scan


def _read_csv(path: Path, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """The rows of a CSV with their line numbers. Accepts what spreadsheet programs write: UTF-8 with or without
    Excel's byte-order mark, UTF-16 with its byte-order mark, and comma, semicolon or tab separators."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; the site's ISIC folder must hold {path.name} in the official format")
    text = _csv_text(path)
    header = text.partition("\n")[0]
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=max(_DELIMITERS, key=header.count))
    fields = [name.strip() for name in reader.fieldnames or []]
    reader.fieldnames = fields
    missing = [c for c in required if c not in fields]
    if missing:
        raise DataError(f"{path}: missing columns {missing} (header {fields}); use the official ISIC 2019 header")
    return [(reader.line_num, row) for row in reader]


def _csv_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror}); "
                        "give the agent's service account read access") from err
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}: not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}; probably Latin-1 / Windows-1252, "
            "as older spreadsheet programs save). Save it as UTF-8 (Excel: 'CSV UTF-8 (Comma delimited)') or convert "
            f"it, e.g. `iconv -f WINDOWS-1252 -t UTF-8 {path.name} > utf8.csv`"
        ) from None


def _read_lesion_ids(path: Path) -> dict[str, str | None]:
    if not path.exists():
        return {}
    return {row["image"]: row["lesion_id"] or None for _, row in _read_csv(path, METADATA_COLUMNS)}


def _diagnosis(row: dict[str, str]) -> str:
    """The one class a one-hot row names; a ValueError saying why for a value other than 0 or 1, or for no or
    several labels.
    A decimal comma (1,0), as spreadsheets in many locales write, reads as a decimal point."""
    found = []
    for name in ISIC_CLASSES:
        text = (row[name] or "").strip()
        try:
            value = float(text.replace(",", "."))
        except ValueError:
            value = math.nan
        if value not in (0.0, 1.0):
            raise ValueError(f"column {name} is {text!r}, expected 0.0 or 1.0 (one-hot)")
        if value == 1.0:
            found.append(name)
    if len(found) != 1:
        raise ValueError("no label" if not found else f"several labels {found}")
    return found[0]


def _image_path(images: Path, name: str) -> Path | None:
    for candidate in (images / f"{name}.jpg", images / f"{name}_downsampled.jpg"):
        if candidate.is_file():
            return candidate
    return None


def _report(scan: IsicScan, on_error: str) -> None:
    if scan.other_classes:
        log.info("%s: left out %d rows of classes outside the subset (%s)", scan.csv, sum(scan.other_classes.values()),
                 dict(scan.other_classes))
    if not scan.problems:
        return
    listed = describe_problems(scan.problems)
    if on_error == "raise":
        raise DataError(
            f"{scan.csv}: {len(scan.problems)} of {scan.rows} rows cannot be used: {listed}. Fix the rows or images, "
            "or read with on_error='skip' to skip them (the count is logged)"
        )
    log.warning("%s: skipped %d of %d rows that cannot be used: %s", scan.csv, len(scan.problems), scan.rows, listed)


def describe_problems(problems: Sequence[RowProblem], shown: int = _EXAMPLES_SHOWN) -> str:
    """The first `shown` problems as "line N IMAGE: why", and how many more there are."""
    examples = "; ".join(f"line {p.line} {p.image}: {p.reason}" for p in problems[:shown])
    return examples + (f" and {len(problems) - shown} more" if len(problems) > shown else "")


@dataclass(frozen=True)
class IsicImageReader:
    """`ImageReader` for dermoscopy photos: (3, H, W) float32 RGB as stored (0-255); the pipeline resizes and scales.
    Images with a side under `min_side` pixels are refused."""

    min_side: int = MIN_IMAGE_SIDE

    def can_read(self, path: Path) -> bool:
        return Path(path).suffix.lower() in {".jpg", ".jpeg", ".png"}

    def read(self, path: Path) -> Image:
        """Refuses images over `MAX_IMAGE_PIXELS` or under `min_side` from their header, before decoding a byte of
        pixel data."""
        refuse_broken_link(Path(path), "image")
        try:
            with PILImage.open(path) as photo:
                width, height = photo.size
                wrong_size = width * height > MAX_IMAGE_PIXELS or min(width, height) < self.min_side
                array = None if wrong_size else np.asarray(photo.convert("RGB"), dtype=np.float32)
        except PILImage.DecompressionBombError as err:  # beyond PIL's own limit, raised on opening
            raise _too_large(path, str(err)) from err
        except (PermissionError, IsADirectoryError) as err:
            raise os_error(Path(path), err, "image") from err
        except Exception as err:  # PIL's decoders raise OSError, SyntaxError, ValueError, struct.error, ...
            raise DataError(f"{path}: image does not decode ({err}); replace the file or remove its CSV row") from err
        if array is None and min(width, height) < self.min_side:
            raise DataError(
                f"{path}: image of {width} x {height} pixels, under the {self.min_side} pixels a side the agent reads "
                "(a thumbnail, an icon or a damaged export); replace it with the full-size photo or remove its CSV row"
            )
        if array is None:
            raise _too_large(path, f"{width} x {height} = {width * height} pixels")
        return Image(np.ascontiguousarray(array.transpose(2, 0, 1)), np.eye(3), Path(path))


def _too_large(path: Path, size: str) -> DataError:
    return DataError(
        f"{path}: image too large ({size}; the agent reads at most {MAX_IMAGE_PIXELS} pixels): a decompression bomb "
        "or an original that was never downscaled. Downscale it (the jobs read images at a few hundred pixels) or "
        "remove its CSV row"
    )


class LoadIsicd(MapTransform):
    """MONAI dictionary transform: the record's image path under "image" -> its (3, H, W) float32 RGB (0-255)."""

    def __init__(self, min_side: int = MIN_IMAGE_SIDE) -> None:
        super().__init__(keys="image")
        self.reader = IsicImageReader(min_side)

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        out = dict(data)
        for key in self.key_iterator(out):
            out[key] = self.reader.read(Path(out[key])).array
        return out


def isic_transforms(
    image_size: int, extra: Sequence[Callable[..., Any]] = (), min_side: int = MIN_IMAGE_SIDE
) -> Compose:
    """Decode, resize to `image_size` x `image_size`, scale 0-255 to [0, 1], plain tensors (no MONAI metadata),
    then the job's own transforms (`extra`).

    MONAI's Resize has no antialiased bilinear mode (PIL's, used before); "area" (a box filter when shrinking) is
    as fast and stays within about 0.005 mean absolute difference of it, where bilinear without antialiasing
    aliases. Images already at `image_size` pass through unchanged: their values are the stored pixels / 255.
    """
    return Compose(
        [
            LoadIsicd(min_side),
            Resized("image", spatial_size=(image_size, image_size), mode="area"),
            ScaleIntensityRanged("image", a_min=0.0, a_max=255.0, b_min=0.0, b_max=1.0),
            EnsureTyped(("image", "label"), track_meta=False),
            *extra,
        ]
    )


def isic_dataset(records: Sequence[IsicRecord], image_size: int, min_side: int = MIN_IMAGE_SIDE) -> SiteDataset:
    """A MONAI dataset of {"image": (3, S, S) float32 in [0, 1], "label": int64} dicts, decoded on access so that
    large sites need not fit in memory; an image that does not decode raises the `DataError` naming it."""
    return SiteDataset([record.record() for record in records], isic_transforms(image_size, min_side=min_side))


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
