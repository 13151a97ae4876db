"""DICOM series reading and writing with pydicom: grouping, geometric ordering, rescale, affine, slice checks.

Slices are ordered by ImagePositionPatient projected on the slice normal, never by InstanceNumber, and files
of different series (SeriesInstanceUID) are never stacked together: these are the two ways a naive reader
silently builds a wrong volume. The volume is indexed (column, row, slice), so that together with the RAS affine
it matches what nibabel gives for the same image stored as NIfTI.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.errors import InvalidDicomError
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian, MRImageStorage, generate_uid

from site_agent.data.reader import DataError, Image, require_finite

LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
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
_GEOMETRY = ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing")
_SERIES_INSTANCE_UID, _FRAME_OF_REFERENCE_UID = 0x0020000E, 0x00200052
# Direction cosines are written with a few decimals; beyond this they are not unit length or not orthogonal.
_ORIENTATION_ATOL = 1e-3
_REEXPORT = "re-export the series from the PACS"
# Positions are written with a few decimals; a slice gap counts as uneven beyond this fraction of the spacing.
_SPACING_RTOL = 0.01
_SPACING_ATOL_MM = 1e-3
_NATIVE_LITTLE_ENDIAN = frozenset({ExplicitVRLittleEndian, ImplicitVRLittleEndian})
_NOT_SLICE_FILES = frozenset({"DICOMDIR"})


def series_files(folder: Path) -> dict[str, list[Path]]:
    """The DICOM files of `folder`, grouped by SeriesInstanceUID: use it to separate series sharing a folder."""
    return {uid: [path for path, _ in slices] for uid, slices in _read_folder(Path(folder)).items()}


def read_dicom_series(folder: Path, series_uid: str | None = None) -> Image:
    """Read the one series in `folder` (or the one with `series_uid`) as a (1, X, Y, Z) float32 `Image`.

    Values are RescaleSlope * stored + RescaleIntercept, slice by slice. Raises `DataError` when the folder holds
    several series and none is chosen, when geometry tags are missing or disagree, when slices are missing or
    duplicated (uneven spacing along the normal), or when the pixel data cannot be decoded.
    """
    folder = Path(folder)
    return _stack(folder, _ordered_series(folder, series_uid))


def series_slices(folder: Path, series_uid: str | None = None) -> list[Dataset]:
    """The slice files of the series `read_dicom_series` reads, in the order it stacks them (file k is
    `volume[:, :, k]`, its rows along the volume's second axis): what a derived object such as a DICOM
    Segmentation references frame by frame."""
    return [item.ds for item in _ordered_series(Path(folder), series_uid)]


def _ordered_series(folder: Path, series_uid: str | None) -> list[_Slice]:
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
    return _sorted_along_normal(folder, slices)


@dataclass(frozen=True)
class DicomSeriesReader:
    """`ImageReader` for a folder holding one DICOM series (or several, with `series_uid` choosing one)."""

    series_uid: str | None = None

    def can_read(self, path: Path) -> bool:
        return Path(path).is_dir()

    def read(self, path: Path) -> Image:
        return read_dicom_series(path, self.series_uid)


@dataclass(frozen=True)
class SeriesIds:
    """The UIDs that tie slices into a series, series into a study, and series onto one frame of reference."""

    study: str
    series: str
    frame_of_reference: str
    patient_id: str


def write_dicom_series(
    folder: Path,
    stored: np.ndarray,
    affine: np.ndarray,
    ids: SeriesIds,
    description: str,
    slope: float = 1.0,
    intercept: float = 0.0,
    series_number: int = 1,
) -> list[Path]:
    """Write a (X, Y, Z) uint16 volume as one single-frame MR file per slice, with all geometry tags.

    `affine` is RAS voxel-to-world (as for NIfTI); `read_dicom_series` gives back `stored * slope + intercept`
    and the same affine. SOP instance UIDs derive from the series UID, so the same input writes the same files.
    """
    if stored.ndim != 3 or stored.dtype != np.uint16:
        raise ValueError(f"expected a (X, Y, Z) uint16 volume, got {stored.shape} {stored.dtype}")
    lps = LPS_TO_RAS @ np.asarray(affine, dtype=float)
    col_step, row_step, slice_step, origin = lps[:3, 0], lps[:3, 1], lps[:3, 2], lps[:3, 3]
    col_spacing, row_spacing = float(np.linalg.norm(col_step)), float(np.linalg.norm(row_step))
    if abs(np.dot(col_step, row_step)) > 1e-6 * col_spacing * row_spacing:
        raise ValueError("DICOM slices need orthogonal in-plane axes: the affine's first two columns are not")
    orientation = [*(col_step / col_spacing), *(row_step / row_spacing)]
    slice_spacing = float(np.linalg.norm(slice_step))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(stored.shape[2]):
        ds = _slice_header(ids, description, series_number, k)
        ds.ImagePositionPatient = [_ds_decimal(v) for v in origin + k * slice_step]
        ds.ImageOrientationPatient = [_ds_decimal(v) for v in orientation]
        ds.PixelSpacing = [_ds_decimal(row_spacing), _ds_decimal(col_spacing)]
        ds.SliceThickness = _ds_decimal(slice_spacing)
        ds.SpacingBetweenSlices = _ds_decimal(slice_spacing)
        ds.RescaleSlope = _ds_decimal(slope)
        ds.RescaleIntercept = _ds_decimal(intercept)
        ds.set_pixel_data(np.ascontiguousarray(stored[:, :, k].T), "MONOCHROME2", 16, generate_instance_uid=False)
        path = folder / f"IM{k + 1:04d}.dcm"
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths


def _slice_header(ids: SeriesIds, description: str, series_number: int, index: int) -> Dataset:
    sop_uid = generate_uid(entropy_srcs=[ids.series, str(index)])
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MRImageStorage
    meta.MediaStorageSOPInstanceUID = sop_uid
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MRImageStorage
    ds.SOPInstanceUID = sop_uid
    ds.Modality = "MR"
    ds.PatientID = ids.patient_id
    ds.PatientName = ids.patient_id
    ds.StudyInstanceUID = ids.study
    ds.SeriesInstanceUID = ids.series
    ds.FrameOfReferenceUID = ids.frame_of_reference
    ds.SeriesDescription = description
    ds.SeriesNumber = series_number
    ds.InstanceNumber = index + 1
    return ds


def _ds_decimal(value: float) -> str:
    """DICOM DS values hold at most 16 characters; 10 significant digits keep positions exact to ~1e-6 mm."""
    return f"{float(value):.10g}"


def _read_folder(folder: Path) -> dict[str, list[tuple[Path, Dataset]]]:
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; a DICOM series is read from the folder holding its slice files")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.name not in _NOT_SLICE_FILES)
    if not files:
        raise DataError(f"{folder}: no DICOM files here; point the agent at the folder that holds the series' slices")
    groups: dict[str, list[tuple[Path, Dataset]]] = {}
    for path in files:
        try:
            ds = pydicom.dcmread(path)
        except (InvalidDicomError, OSError, EOFError, ValueError) as err:
            raise DataError(f"{path}: not a readable DICOM file ({err}); remove it from the series folder or replace it") from err
        uid = _text(ds, _SERIES_INSTANCE_UID)
        if not uid:
            raise DataError(f"{path}: has no SeriesInstanceUID; it is not an image slice, remove it from the series folder")
        groups.setdefault(uid, []).append((path, ds))
    return groups


class _Slice(NamedTuple):
    """One file's header values that matter, parsed and validated once (pydicom converts element values lazily
    and slowly)."""

    path: Path
    ds: Dataset
    grid: tuple[float, ...]  # Rows, Columns, ImageOrientationPatient (6), PixelSpacing (2): equal within a series
    position: tuple[float, ...]
    slope: float
    intercept: float
    frame_of_reference: str | None


def _parse(path: Path, ds: Dataset) -> _Slice:
    geometry = {keyword: _numbers(path, ds, keyword) for keyword in _GEOMETRY}
    missing = [keyword for keyword, value in geometry.items() if value is None] + [t for t in ("Rows", "Columns") if t not in ds]
    if missing:
        raise DataError(f"{path}: missing geometry tags {missing}; the series cannot be placed in space: {_REEXPORT}")
    position, orientation, spacing = (geometry[keyword] or () for keyword in _GEOMETRY)
    (frames,) = _numbers(path, ds, "NumberOfFrames") or (1.0,)
    if frames > 1 or int(ds.get("SamplesPerPixel") or 1) != 1:
        raise DataError(f"{path}: multi-frame or colour image; export the series as single-frame greyscale slices")
    if min(spacing) <= 0:
        raise DataError(f"{path}: PixelSpacing {list(spacing)} is not positive; the header is damaged, {_REEXPORT}")
    _check_orientation(path, orientation)
    (slope,) = _numbers(path, ds, "RescaleSlope") or (1.0,)
    (intercept,) = _numbers(path, ds, "RescaleIntercept") or (0.0,)
    if slope == 0:
        raise DataError(f"{path}: RescaleSlope is 0, which would make every value {intercept:g}; the header is damaged, "
                        f"{_REEXPORT}")
    grid = (float(ds.Rows), float(ds.Columns), *orientation, *spacing)
    return _Slice(path, ds, grid, position, slope, intercept, _text(ds, _FRAME_OF_REFERENCE_UID))


def _check_orientation(path: Path, orientation: tuple[float, ...]) -> None:
    """Unit-length, orthogonal row and column directions: otherwise voxel sizes or the slice normal come out wrong."""
    row, col = np.asarray(orientation[:3]), np.asarray(orientation[3:])
    lengths = np.linalg.norm(row), np.linalg.norm(col)
    if max(abs(length - 1.0) for length in lengths) > _ORIENTATION_ATOL:
        raise DataError(
            f"{path}: ImageOrientationPatient {list(orientation)} holds direction vectors of length "
            f"{lengths[0]:.4g} and {lengths[1]:.4g}, not 1; the header is damaged, {_REEXPORT}"
        )
    if abs(float(np.dot(row, col))) > _ORIENTATION_ATOL:
        raise DataError(
            f"{path}: ImageOrientationPatient {list(orientation)} has row and column directions that are not "
            f"perpendicular (cosine {float(np.dot(row, col)):.4g}); the header is damaged, {_REEXPORT}"
        )


def _numbers(path: Path, ds: Dataset, keyword: str) -> tuple[float, ...] | None:
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
        numbers = tuple(float(part) for part in parts)
    except ValueError:
        numbers = ()
    if not numbers or not all(np.isfinite(numbers)):
        raise DataError(f"{path}: {keyword} {'/'.join(parts)!r} is not {count} finite number(s) ({meaning}); {_REEXPORT}")
    if len(numbers) != count:
        raise DataError(
            f"{path}: {keyword} holds {len(numbers)} value(s) {list(numbers)}, expected {count} ({meaning}); {_REEXPORT}"
        )
    return numbers


def _text(ds: Dataset, tag: int) -> str | None:
    """A string element's value, read from the raw bytes like `_numbers`."""
    if tag not in ds:
        return None
    value = ds.get_item(tag).value
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value or "")
    return text.strip(" \x00") or None


def _sorted_along_normal(folder: Path, files: list[tuple[Path, Dataset]]) -> list[_Slice]:
    """Check one frame of reference and one grid for all slices, then order them by position along the normal and
    check the spacing."""
    slices = [_parse(path, ds) for path, ds in files]
    _check_one_frame_of_reference(slices)
    grids = np.array([s.grid for s in slices])
    differs = np.abs(grids - grids[0]) > 1e-4
    if differs.any():
        i, j = np.argwhere(differs)[0]
        tag = ("Rows", "Columns", *["ImageOrientationPatient"] * 6, *["PixelSpacing"] * 2)[j]
        raise DataError(
            f"{slices[i].path}: {tag} {slices[i].ds[tag].value} differs from {slices[0].path.name} "
            f"({slices[0].ds[tag].value}); the folder mixes acquisitions. Keep one series per folder"
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
        a, b = ordered[duplicate[0]].path, ordered[duplicate[0] + 1].path
        raise DataError(f"{folder}: duplicate slice: {a.name} and {b.name} lie at the same position; remove the duplicate file")
    spacing = float(np.median(gaps))
    uneven = np.flatnonzero(np.abs(gaps - spacing) > max(_SPACING_ATOL_MM, _SPACING_RTOL * spacing))
    if uneven.size:
        i = uneven[0]
        a, b = ordered[i].path, ordered[i + 1].path
        missing = round(gaps[i] / spacing) - 1
        what = f"about {missing} missing slice(s)" if missing >= 1 else "uneven slice spacing"
        raise DataError(
            f"{folder}: {what} between {a.name} and {b.name} (gap {gaps[i]:.4g} mm, spacing {spacing:.4g} mm); "
            "re-export the complete series from the PACS"
        )
    return ordered


def _check_one_frame_of_reference(slices: list[_Slice]) -> None:
    """Positions on different frames of reference are not comparable, so such slices cannot be stacked."""
    frames = Counter(s.frame_of_reference for s in slices)
    if len(frames) > 1:
        usual = frames.most_common(1)[0][0]
        odd = next(s for s in slices if s.frame_of_reference != usual)
        raise DataError(
            f"{odd.path}: FrameOfReferenceUID {odd.frame_of_reference} differs from the series' {usual} "
            f"({frames[usual]} of {len(slices)} files); its positions are not comparable with the others'. "
            f"Remove the file or {_REEXPORT}"
        )


def _stack(folder: Path, ordered: list[_Slice]) -> Image:
    rows, cols = int(ordered[0].grid[0]), int(ordered[0].grid[1])
    buffer = np.empty((len(ordered), rows, cols), dtype=np.float32)
    for k, item in enumerate(ordered):
        try:
            pixels = _pixels(item.ds, rows, cols)
        except Exception as err:  # pydicom raises RuntimeError/ValueError/NotImplementedError by decoder
            raise _decode_error(item.path, item.ds, err) from err
        if pixels.shape != (rows, cols):
            raise DataError(
                f"{item.path}: pixel data of shape {pixels.shape}, expected ({rows}, {cols}); the file is damaged, re-export it"
            )
        out = buffer[k]
        out[...] = pixels  # cast, then scale in place: faster than one mixed-type multiply
        if item.slope != 1.0:
            out *= np.float32(item.slope)
        if item.intercept != 0.0:
            out += np.float32(item.intercept)
    return require_finite(Image(buffer.transpose(2, 1, 0)[None], _affine(ordered), folder), _REEXPORT)


def _pixels(ds: Dataset, rows: int, cols: int) -> np.ndarray:
    """One slice's stored values. Uncompressed little-endian 16-bit data (the usual MR/CT export) is viewed
    straight from the file's bytes, as pydicom itself does, minus its per-call decoder set-up, which costs more
    than the copy for a 256x256 slice; every other encoding goes through pydicom's decoders."""
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
            "listed above into the agent's environment, or convert the series to uncompressed DICOM "
            "(e.g. `gdcmconv --raw IN OUT`)"
        )
    return DataError(f"{path}: pixel data cannot be decoded ({err}); the file is damaged, re-export the series")


def _affine(ordered: Sequence[_Slice]) -> np.ndarray:
    """RAS voxel-to-world affine; the slice step comes from the first and last positions (handles gantry tilt)."""
    first = ordered[0]
    row_dir, col_dir = np.asarray(first.grid[2:5]), np.asarray(first.grid[5:8])
    row_spacing, col_spacing = first.grid[8:10]
    origin = np.asarray(first.position)
    if len(ordered) > 1:
        slice_step = (np.asarray(ordered[-1].position) - origin) / (len(ordered) - 1)
    else:
        (thickness,) = (
            _numbers(first.path, first.ds, "SpacingBetweenSlices") or _numbers(first.path, first.ds, "SliceThickness") or (1.0,)
        )
        if thickness <= 0:
            raise DataError(f"{first.path}: slice spacing {thickness:g} mm is not positive; {_REEXPORT}")
        slice_step = np.cross(row_dir, col_dir) * thickness
    lps = np.eye(4)
    lps[:3, 0] = row_dir * col_spacing
    lps[:3, 1] = col_dir * row_spacing
    lps[:3, 2] = slice_step
    lps[:3, 3] = origin
    return LPS_TO_RAS @ lps
