"""The header values a DICOM slice (a single-frame file, or one frame of a multi-frame file) is placed and scaled by,
parsed and validated once, each bad value a `DataError` naming the file (and frame), the tag and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydicom.dataset import Dataset

from site_agent.data.readers.reader import DataError

REEXPORT = "re-export the series from the PACS"
# Every header number the reader uses: keyword -> (tag, how many values, what they mean).
_NUMBERS = {
    "ImagePositionPatient": (0x00200032, 3, "x, y, z of the first pixel in mm"),
    "ImageOrientationPatient": (0x00200037, 6, "row and column direction cosines"),
    "PixelSpacing": (0x00280030, 2, "row and column spacing in mm"),
    "RescaleSlope": (0x00281053, 1, "stored-to-real value scale"),
    "RescaleIntercept": (0x00281052, 1, "stored-to-real value offset"),
    "SpacingBetweenSlices": (0x00180088, 1, "slice spacing in mm"),
    "SliceThickness": (0x00180050, 1, "slice thickness in mm"),
    "NumberOfFrames": (0x00280008, 1, "frames in the file"),
}
GEOMETRY = ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing")
GRID_TAGS = ("Rows", "Columns", *["ImageOrientationPatient"] * 6, *["PixelSpacing"] * 2)
"""The tag of each value of `Slice.grid`."""
SERIES_INSTANCE_UID, FRAME_OF_REFERENCE_UID = 0x0020000E, 0x00200052
MONOCHROME2, MONOCHROME1 = "MONOCHROME2", "MONOCHROME1"
# Direction cosines are written with a few decimals; beyond this they are not unit length or not orthogonal.
_ORIENTATION_ATOL = 1e-3


class Slice(NamedTuple):
    """One slice's header values that matter (pydicom converts element values lazily and slowly)."""

    path: Path
    ds: Dataset
    frame: int | None  # 0-based frame of a multi-frame file; None for a single-frame file
    grid: tuple[float, ...]  # Rows, Columns, ImageOrientationPatient (6), PixelSpacing (2): equal within a series
    position: tuple[float, ...]
    slope: float
    intercept: float
    frame_of_reference: str | None
    photometric: str
    measures: Dataset  # where this slice's SliceThickness / SpacingBetweenSlices lie

    @property
    def name(self) -> str:
        """The slice as messages name it: its file name, and its frame in a multi-frame file."""
        return self.path.name if self.frame is None else f"{self.path.name} frame {self.frame + 1}"

    @property
    def where(self) -> str:
        """The slice's full path (and frame), for the start of a message."""
        return str(self.path) if self.frame is None else f"{self.path} frame {self.frame + 1}"


def parse_slice(path: Path, ds: Dataset, frame: int | None, values: Mapping[str, Dataset]) -> Slice:
    """Validate and collect one slice's values; `values[keyword]` is the dataset holding that keyword's element
    (the file itself for a single-frame file; a functional group item for a frame)."""
    where = str(path) if frame is None else f"{path} frame {frame + 1}"
    geometry = {keyword: numbers(where, values[keyword], keyword) for keyword in GEOMETRY}
    missing = ([keyword for keyword, value in geometry.items() if value is None]
               + [t for t in ("Rows", "Columns") if t not in ds])
    if missing:
        raise DataError(f"{where}: missing geometry tags {missing}; the series cannot be placed in space: {REEXPORT}")
    position, orientation, spacing = (geometry[keyword] or () for keyword in GEOMETRY)
    if int(ds.get("SamplesPerPixel") or 1) != 1:
        raise DataError(f"{path}: a colour image ({ds.get('PhotometricInterpretation')}); "
                        "MR and CT series are greyscale, export the series as greyscale (MONOCHROME2) images")
    photometric = text(ds, 0x00280004) or MONOCHROME2
    if photometric not in (MONOCHROME1, MONOCHROME2):
        raise DataError(f"{path}: PhotometricInterpretation {photometric}; MR and CT series are greyscale, export the "
                        "series as MONOCHROME2 images")
    if min(spacing) <= 0:
        raise DataError(f"{where}: PixelSpacing {list(spacing)} is not positive; the header is damaged, {REEXPORT}")
    _check_orientation(where, orientation)
    (slope,) = numbers(where, values["RescaleSlope"], "RescaleSlope") or (1.0,)
    (intercept,) = numbers(where, values["RescaleIntercept"], "RescaleIntercept") or (0.0,)
    if slope == 0:
        raise DataError(f"{where}: RescaleSlope is 0, which would make every value {intercept:g}; "
                        f"the header is damaged, {REEXPORT}")
    grid = (float(ds.Rows), float(ds.Columns), *orientation, *spacing)
    return Slice(path, ds, frame, grid, position, slope, intercept, text(ds, FRAME_OF_REFERENCE_UID), photometric,
                 values["SliceThickness"])


def _check_orientation(where: str, orientation: tuple[float, ...]) -> None:
    """Unit-length, orthogonal row and column directions: otherwise voxel sizes or the slice normal come out wrong."""
    row, col = np.asarray(orientation[:3]), np.asarray(orientation[3:])
    lengths = np.linalg.norm(row), np.linalg.norm(col)
    if max(abs(length - 1.0) for length in lengths) > _ORIENTATION_ATOL:
        raise DataError(
            f"{where}: ImageOrientationPatient {list(orientation)} holds direction vectors of length "
            f"{lengths[0]:.4g} and {lengths[1]:.4g}, not 1; the header is damaged, {REEXPORT}"
        )
    if abs(float(np.dot(row, col))) > _ORIENTATION_ATOL:
        raise DataError(
            f"{where}: ImageOrientationPatient {list(orientation)} has row and column directions that are not "
            f"perpendicular (cosine {float(np.dot(row, col)):.4g}); the header is damaged, {REEXPORT}"
        )


def numbers(where: str, ds: Dataset, keyword: str) -> tuple[float, ...] | None:
    """The finite numbers of a DS/IS element in `_NUMBERS`, or None if absent or empty; a `DataError` naming the
    file and tag if they do not parse, are not finite, or are too few or too many.

    Parses the raw bytes when pydicom has not converted them yet: 8x faster than its DSfloat conversion, which
    otherwise dominates the header cost of a series read (see bench/README.md).
    """
    tag, count, meaning = _NUMBERS[keyword]
    if tag not in ds:
        return None
    value = ds.get_item(tag).value
    if isinstance(value, bytes):
        parts = [part.strip(b" \x00").decode("ascii", "replace") for part in value.split(b"\\")]
    elif isinstance(value, (str, float, int)):
        parts = [str(value).strip()]
    else:
        parts = [str(v).strip() for v in value or ()]
    if not any(parts):
        return None
    try:
        found = tuple(float(part) for part in parts)
    except ValueError:
        found = ()
    if not found or not all(np.isfinite(found)):
        raise DataError(f"{where}: {keyword} {'/'.join(parts)!r} is not {count} finite number(s) ({meaning}); "
                        f"{REEXPORT}")
    if len(found) != count:
        raise DataError(
            f"{where}: {keyword} holds {len(found)} value(s) {list(found)}, expected {count} ({meaning}); {REEXPORT}"
        )
    return found


def text(ds: Dataset, tag: int) -> str | None:
    """A string element's value, read from the raw bytes like `numbers`."""
    if tag not in ds:
        return None
    value = ds.get_item(tag).value
    decoded = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value or "")
    return decoded.strip(" \x00") or None
