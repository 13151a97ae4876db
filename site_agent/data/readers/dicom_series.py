"""DICOM series reading with pydicom: grouping, geometric ordering, rescale, affine, slice checks.

Slices are ordered by ImagePositionPatient projected on the slice normal, never by InstanceNumber, and files
of different series (SeriesInstanceUID) are never stacked together: these are the two ways a naive reader
silently builds a wrong volume. A series is single-frame files (one per slice) or Enhanced multi-frame files
(`site_agent.data.readers.dicom_frames`), whose frames go through the same checks. The volume is indexed (column, row,
slice), so that together with the RAS affine it matches what nibabel gives for the same image stored as NIfTI.
Demo series are written by `site_agent.data.demo.dicom_demo`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.errors import InvalidDicomError
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian

from site_agent.data.readers.dicom_frames import FrameSelection, frame_slices, is_multi_frame
from site_agent.data.readers.dicom_header import (
    GRID_TAGS,
    MONOCHROME1,
    REEXPORT,
    SERIES_INSTANCE_UID,
    Slice,
    numbers,
    parse_slice,
    text,
)
from site_agent.data.readers.reader import DataError, Image, os_error, refuse_broken_link, require_finite

LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
# Positions are written with a few decimals; a slice gap counts as uneven beyond this fraction of the spacing.
_SPACING_RTOL = 0.01
_SPACING_ATOL_MM = 1e-3
_NATIVE_LITTLE_ENDIAN = frozenset({ExplicitVRLittleEndian, ImplicitVRLittleEndian})
_NOT_SLICE_FILES = frozenset({"DICOMDIR"})
_DECODERS = "pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg pylibjpeg-rle pyjpegls"
"""The decoder packages the agent installs (pyproject.toml): what to reinstall when pydicom finds none."""


def series_files(folder: Path) -> dict[str, list[Path]]:
    """The DICOM files of `folder`, grouped by SeriesInstanceUID: use it to separate series sharing a folder."""
    return {uid: [path for path, _ in slices] for uid, slices in _read_folder(Path(folder)).items()}


def read_dicom_series(folder: Path, series_uid: str | None = None, frames: FrameSelection | None = None) -> Image:
    """Read the one series in `folder` (or the one with `series_uid`) as a (1, X, Y, Z) float32 `Image`.

    Values are RescaleSlope * stored + RescaleIntercept, slice by slice (frame by frame). `frames` chooses one
    volume of a multi-frame file holding several (`site_agent.data.readers.dicom_frames.DIMENSIONS`), e.g.
    {"EffectiveEchoTime": 4.6}. Raises `DataError` when the folder holds several series and none is chosen, when
    geometry tags are missing or disagree, when slices are missing or duplicated (uneven spacing along the
    normal), when slices are MONOCHROME1, or when the pixel data cannot be decoded.
    """
    folder = Path(folder)
    return _stack(folder, _ordered_series(folder, series_uid, frames))


def series_slices(folder: Path, series_uid: str | None = None) -> list[Dataset]:
    """The slice files of the series `read_dicom_series` reads, in the order it stacks them (file k is
    `volume[:, :, k]`, its rows along the volume's second axis); a multi-frame file appears once per frame (see
    `ordered_slices` for the frames)."""
    return [item.ds for item in ordered_slices(folder, series_uid)]


def ordered_slices(folder: Path, series_uid: str | None = None) -> list[Slice]:
    """The slices `read_dicom_series` stacks, in its order, each with its file's dataset and, in a multi-frame
    file, its frame: what a derived object such as a DICOM Segmentation references slice by slice."""
    return _ordered_series(Path(folder), series_uid, None)


def _ordered_series(folder: Path, series_uid: str | None, frames: FrameSelection | None) -> list[Slice]:
    groups = _read_folder(folder)
    if series_uid is None:
        if len(groups) > 1:
            listing = "; ".join(
                f"{uid} ({slices[0][1].get('SeriesDescription', 'no description')}, {len(slices)} files)"
                for uid, slices in groups.items()
            )
            raise DataError(
                f"{folder}: holds {len(groups)} DICOM series ({listing}); they are never stacked together. "
                "Move each series into its own folder, or choose one with series_uid=..."
            )
        slices = next(iter(groups.values()))
    elif series_uid in groups:
        slices = groups[series_uid]
    else:
        raise DataError(f"{folder}: no series with SeriesInstanceUID {series_uid}; it holds {sorted(groups)}")
    parsed = [item for path, ds in slices for item in _slices_of(path, ds, frames)]
    return _sorted_along_normal(folder, parsed)


@dataclass(frozen=True)
class DicomSeriesReader:
    """`ImageReader` for a folder holding one DICOM series (or several, with `series_uid` choosing one; `frames`
    chooses a volume of a multi-frame file holding several, as for `read_dicom_series`)."""

    series_uid: str | None = None
    frames: FrameSelection | None = None

    def can_read(self, path: Path) -> bool:
        return Path(path).is_dir()

    def read(self, path: Path) -> Image:
        return read_dicom_series(path, self.series_uid, self.frames)


def _read_folder(folder: Path) -> dict[str, list[tuple[Path, Dataset]]]:
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; a DICOM series is read from the folder holding its slice files")
    files = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name in _NOT_SLICE_FILES:
            continue
        refuse_broken_link(path, "slice file")
        if path.is_file():
            files.append(path)
    if not files:
        raise DataError(f"{folder}: no DICOM files here; point the agent at the folder that holds the series' slices")
    groups: dict[str, list[tuple[Path, Dataset]]] = {}
    for path in files:
        groups.setdefault(_series_uid(path, ds := _dcmread(path)), []).append((path, ds))
    return groups


def _dcmread(path: Path) -> Dataset:
    try:
        return pydicom.dcmread(path)
    except OSError as err:
        raise os_error(path, err, "slice file") from err
    except (InvalidDicomError, EOFError, ValueError) as err:
        raise DataError(f"{path}: not a readable DICOM file ({err}); "
                        "remove it from the series folder or replace it") from err


def _series_uid(path: Path, ds: Dataset) -> str:
    uid = text(ds, SERIES_INSTANCE_UID)
    if uid:
        return uid
    if not any(tag.group > 0x0002 for tag in ds.keys()):
        raise DataError(f"{path}: holds no DICOM data elements ({path.stat().st_size} bytes): the file is empty or "
                        "truncated, e.g. a copy cut short; copy it again from the PACS")
    if "PixelData" not in ds:
        raise DataError(f"{path}: has no SeriesInstanceUID and no pixel data ({path.stat().st_size} bytes): a file cut "
                        "short (truncated) or not an image slice; copy it again from the PACS, or remove it from the "
                        "series folder")
    raise DataError(f"{path}: has no SeriesInstanceUID; it is not an image slice, remove it from the series folder")


def _slices_of(path: Path, ds: Dataset, frames: FrameSelection | None) -> list[Slice]:
    if is_multi_frame(path, ds):
        return frame_slices(path, ds, frames)
    return [parse_slice(path, ds, None, dict.fromkeys(_HEADER_KEYWORDS, ds))]


_HEADER_KEYWORDS = ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing", "SliceThickness", "RescaleSlope",
                    "RescaleIntercept")


def _sorted_along_normal(folder: Path, slices: list[Slice]) -> list[Slice]:
    """Check one frame of reference, one photometric interpretation and one grid for all slices, then order them
    by position along the normal and check the spacing."""
    _check_one_frame_of_reference(slices)
    _check_monochrome2(slices)
    grids = np.array([s.grid for s in slices])
    differs = np.abs(grids - grids[0]) > 1e-4
    if differs.any():
        i, j = np.argwhere(differs)[0]
        tag = GRID_TAGS[j]
        span = slice(GRID_TAGS.index(tag), len(GRID_TAGS) - GRID_TAGS[::-1].index(tag))
        raise DataError(
            f"{slices[i].where}: {tag} {grids[i, span].tolist()} differs from {slices[0].name} "
            f"({grids[0, span].tolist()}); the folder mixes acquisitions. Keep one series per folder"
        )
    normal = np.cross(grids[0, 2:5], grids[0, 5:8])
    positions = np.array([s.position for s in slices]) @ normal
    order = np.argsort(positions, kind="stable")
    ordered = [slices[i] for i in order]
    gaps = np.diff(positions[order])
    if gaps.size == 0:
        return ordered
    duplicate = np.flatnonzero(gaps < _SPACING_ATOL_MM)
    if duplicate.size:
        a, b = ordered[duplicate[0]], ordered[duplicate[0] + 1]
        raise DataError(f"{folder}: duplicate slice: {a.name} and {b.name} lie at the same position; "
                        "remove the duplicate file")
    spacing = float(np.median(gaps))
    uneven = np.flatnonzero(np.abs(gaps - spacing) > max(_SPACING_ATOL_MM, _SPACING_RTOL * spacing))
    if uneven.size:
        i = uneven[0]
        a, b = ordered[i], ordered[i + 1]
        missing = round(gaps[i] / spacing) - 1
        what = f"about {missing} missing slice(s)" if missing >= 1 else "uneven slice spacing"
        raise DataError(
            f"{folder}: {what} between {a.name} and {b.name} (gap {gaps[i]:.4g} mm, spacing {spacing:.4g} mm); "
            "re-export the complete series from the PACS"
        )
    return ordered


def _check_one_frame_of_reference(slices: list[Slice]) -> None:
    """Positions on different frames of reference are not comparable, so such slices cannot be stacked."""
    frames = Counter(s.frame_of_reference for s in slices)
    if len(frames) > 1:
        usual = frames.most_common(1)[0][0]
        odd = next(s for s in slices if s.frame_of_reference != usual)
        raise DataError(
            f"{odd.where}: FrameOfReferenceUID {odd.frame_of_reference} differs from the series' {usual} "
            f"({frames[usual]} of {len(slices)} files); its positions are not comparable with the others'. "
            f"Remove the file or {REEXPORT}"
        )


def _check_monochrome2(slices: list[Slice]) -> None:
    """MONOCHROME1 (lowest value shown white, as radiographs are stored) is refused: its stored values may be the
    inverse of what the other sites' MR and CT hold, and how it was inverted (over which range) is not recorded."""
    inverted = [s for s in slices if s.photometric == MONOCHROME1]
    if not inverted:
        return
    if len(inverted) < len(slices):
        raise DataError(
            f"{inverted[0].where}: PhotometricInterpretation MONOCHROME1 (inverted greyscale) while "
            f"{len(slices) - len(inverted)} of the series' {len(slices)} slices are MONOCHROME2; "
            f"its intensities would be inverted against the others'. Remove the slice or {REEXPORT} as MONOCHROME2"
        )
    raise DataError(
        f"{inverted[0].where}: PhotometricInterpretation MONOCHROME1 (inverted greyscale: the lowest value is shown "
        f"white) in all {len(slices)} slices; the agent reads MR and CT as MONOCHROME2, where higher values are "
        f"brighter. {REEXPORT[0].upper() + REEXPORT[1:]} as MONOCHROME2"
    )


def _stack(folder: Path, ordered: list[Slice]) -> Image:
    rows, cols = int(ordered[0].grid[0]), int(ordered[0].grid[1])
    buffer = np.empty((len(ordered), rows, cols), dtype=np.float32)
    decoded: dict[Path, np.ndarray] = {}  # a multi-frame file's frames, decoded once
    for k, item in enumerate(ordered):
        try:
            pixels = _pixels(item, rows, cols, decoded)
        except Exception as err:  # pydicom raises RuntimeError/ValueError/NotImplementedError by decoder
            raise _decode_error(item.path, item.ds, err) from err
        if pixels.shape != (rows, cols):
            raise DataError(
                f"{item.where}: pixel data of shape {pixels.shape}, expected ({rows}, {cols}); "
                "the file is damaged, re-export it"
            )
        out = buffer[k]
        out[...] = pixels  # cast, then scale in place: faster than one mixed-type multiply
        if item.slope != 1.0:
            out *= np.float32(item.slope)
        if item.intercept != 0.0:
            out += np.float32(item.intercept)
    return require_finite(Image(buffer.transpose(2, 1, 0)[None], _affine(ordered), folder), REEXPORT)


def _pixels(item: Slice, rows: int, cols: int, decoded: dict[Path, np.ndarray]) -> np.ndarray:
    """One slice's stored values. Uncompressed little-endian 16-bit data (the usual MR/CT export) is viewed
    straight from the file's bytes, as pydicom itself does, minus its per-call decoder set-up, which costs more
    than the copy for a 256x256 slice; every other encoding goes through pydicom's decoders."""
    ds = item.ds
    if item.frame is not None:
        if item.path not in decoded:
            frames = np.asarray(ds.pixel_array)
            decoded[item.path] = frames if frames.ndim == 3 else frames[None]
        frame: np.ndarray = decoded[item.path][item.frame]
        return frame
    if (
        ds.file_meta.get("TransferSyntaxUID") in _NATIVE_LITTLE_ENDIAN
        and "PixelData" in ds
        and ds.BitsAllocated == 16
        and ds.BitsStored == 16
        and len(ds.PixelData) >= 2 * rows * cols
    ):
        dtype = "<i2" if ds.PixelRepresentation == 1 else "<u2"
        return np.frombuffer(ds.PixelData, dtype=dtype, count=rows * cols).reshape(rows, cols)
    return ds.pixel_array


def _decode_error(path: Path, ds: Dataset, err: Exception) -> DataError:
    syntax = ds.file_meta.get("TransferSyntaxUID")
    if syntax is not None and syntax.is_compressed and "missing dependencies" in str(err):
        return DataError(
            f"{path}: cannot decode its {syntax.name} pixel data: {err}\nInstall one of the decoder packages "
            f"listed above into the agent's environment (the agent's own: `pip install {_DECODERS}`), "
            "or convert the series to uncompressed DICOM (e.g. `gdcmconv --raw IN OUT`)"
        )
    return DataError(f"{path}: pixel data cannot be decoded ({err}); the file is damaged, re-export the series")


def _affine(ordered: Sequence[Slice]) -> np.ndarray:
    """RAS voxel-to-world affine; the slice step comes from the first and last positions (handles gantry tilt)."""
    first = ordered[0]
    row_dir, col_dir = np.asarray(first.grid[2:5]), np.asarray(first.grid[5:8])
    row_spacing, col_spacing = first.grid[8:10]
    origin = np.asarray(first.position)
    if len(ordered) > 1:
        slice_step = (np.asarray(ordered[-1].position) - origin) / (len(ordered) - 1)
    else:
        (thickness,) = (
            numbers(first.where, first.measures, "SpacingBetweenSlices")
            or numbers(first.where, first.measures, "SliceThickness")
            or (1.0,)
        )
        if thickness <= 0:
            raise DataError(f"{first.where}: slice spacing {thickness:g} mm is not positive; {REEXPORT}")
        slice_step = np.cross(row_dir, col_dir) * thickness
    lps = np.eye(4)
    lps[:3, 0] = row_dir * col_spacing
    lps[:3, 1] = col_dir * row_spacing
    lps[:3, 2] = slice_step
    lps[:3, 3] = origin
    return LPS_TO_RAS @ lps
