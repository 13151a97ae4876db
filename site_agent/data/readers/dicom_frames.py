"""Enhanced (multi-frame) MR and CT: one file holds a whole series, each frame placed by the functional groups.

What current scanners (Siemens XA, Philips) export, and what a PACS's legacy converter makes of single-frame
series. Each frame's geometry and rescale come from its per-frame functional group, or from the shared one (plane
position, plane orientation, pixel measures, pixel value transformation), so that the frames then go through
exactly the ordering, spacing, missing-slice and rescale checks of single-frame slices. A file holding several
stacks, temporal positions, echoes or diffusion weightings is not one volume: it is refused, naming what it holds
and how to choose one (`frames=`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from pydicom.datadict import tag_for_keyword
from pydicom.dataset import Dataset

from site_agent.data.readers.dicom_header import Slice, numbers, parse_slice
from site_agent.data.readers.reader import DataError

FrameSelection = Mapping[str, str | float]
"""Which frames of a multi-frame file to read, by dimension: e.g. {"EffectiveEchoTime": 4.6} or {"StackID": "2"}."""
DIMENSIONS: Mapping[str, tuple[str, str]] = {
    "StackID": ("FrameContentSequence", "stacks"),
    "TemporalPositionIndex": ("FrameContentSequence", "temporal positions"),
    "EffectiveEchoTime": ("MREchoSequence", "echoes (echo time in ms)"),
    "DiffusionBValue": ("MRDiffusionSequence", "diffusion b-values"),
}
"""Frame dimensions that make a multi-frame file more than one volume: keyword -> (functional group, what it is)."""
# The functional group holding each header keyword the reader uses.
_GROUPS = {
    "ImagePositionPatient": "PlanePositionSequence",
    "ImageOrientationPatient": "PlaneOrientationSequence",
    "PixelSpacing": "PixelMeasuresSequence",
    "SliceThickness": "PixelMeasuresSequence",
    "RescaleSlope": "PixelValueTransformationSequence",
    "RescaleIntercept": "PixelValueTransformationSequence",
}
_TAGS = {keyword: int(tag_for_keyword(keyword) or 0) for keyword in
         (*_GROUPS, *_GROUPS.values(), *DIMENSIONS, *(group for group, _ in DIMENSIONS.values()))}
_FIX_EXPORT = ("export it from the scanner or PACS again as Enhanced MR/CT with its functional groups, "
               "or as single-frame slices")


def is_multi_frame(path: Path, ds: Dataset) -> bool:
    (frames,) = numbers(str(path), ds, "NumberOfFrames") or (1.0,)
    return frames > 1 or "PerFrameFunctionalGroupsSequence" in ds


def frame_slices(path: Path, ds: Dataset, selection: FrameSelection | None) -> list[Slice]:
    """The frames of one multi-frame file as slices, after checking it holds one volume (or `selection` picks one)."""
    (count,) = numbers(str(path), ds, "NumberOfFrames") or (1.0,)
    frames = int(count)
    shared = ds.SharedFunctionalGroupsSequence[0] if ds.get("SharedFunctionalGroupsSequence") else Dataset()
    per_frame = list(ds.get("PerFrameFunctionalGroupsSequence") or ())
    if not per_frame and not len(shared):
        raise DataError(
            f"{path}: a multi-frame image of {frames} frames without any geometry (no shared or per-frame functional "
            f"groups, so no frame positions, orientation or pixel spacing); it cannot be placed in space: {_FIX_EXPORT}"
        )
    if len(per_frame) != frames:
        raise DataError(f"{path}: PerFrameFunctionalGroupsSequence holds {len(per_frame)} items for {frames} frames; "
                        f"the file is damaged: {_FIX_EXPORT}")
    chosen = _chosen_frames(path, shared, per_frame, selection)
    fallback = _values(shared, dict.fromkeys(_GROUPS, ds))  # looked up once: most of it is shared
    return [parse_slice(path, ds, k, _values(per_frame[k], fallback)) for k in chosen]


def _group(item: Dataset, group: str) -> Dataset | None:
    """The first item of functional group `group` in `item`, or None (tags, not keywords: read per frame)."""
    tag = _TAGS[group]
    if tag not in item:
        return None
    value = item[tag].value
    return value[0] if value else None


def _values(item: Dataset, fallback: dict[str, Dataset]) -> dict[str, Dataset]:
    """For each keyword, the dataset holding it: `item`'s functional group if it holds it, else `fallback`'s."""
    values = dict(fallback)
    for keyword, group in _GROUPS.items():
        holder = _group(item, group)
        if holder is not None and _TAGS[keyword] in holder:
            values[keyword] = holder
    return values


def _dimension(shared: Dataset, frame: Dataset, keyword: str) -> str | float | None:
    group = DIMENSIONS[keyword][0]
    for item in (frame, shared):
        holder = _group(item, group)
        if holder is not None and _TAGS[keyword] in holder:
            value = holder[_TAGS[keyword]].value
            return str(value).strip() if keyword == "StackID" else _normalised(value)
    return None


def _normalised(value: object) -> str | float:
    """Numbers compare as numbers (an echo time 4.60 is 4.6, shown as 4.6; a temporal position 2.0 is 2), anything
    else (a StackID is text) as text."""
    try:
        number = float(str(value))
    except ValueError:
        return str(value).strip()
    return int(number) if number.is_integer() else number


def _chosen_frames(
    path: Path, shared: Dataset, per_frame: list[Dataset], selection: FrameSelection | None
) -> list[int]:
    """The agent reads one 3-D volume per series: a multi-frame file holding several (echoes, stacks, time points) is
    refused unless `frames` picks one, rather than stacked into a volume that mixes them."""
    selection = dict(selection or {})
    unknown = sorted(set(selection) - set(DIMENSIONS))
    if unknown:
        raise ValueError(f"frames={selection}: unknown dimension(s) {unknown}; use {sorted(DIMENSIONS)}")
    chosen = list(range(len(per_frame)))
    for keyword, (_, what) in DIMENSIONS.items():
        values = [_dimension(shared, per_frame[k], keyword) for k in chosen]
        counts = Counter(values)
        if keyword in selection:
            wanted = str(selection[keyword]).strip() if keyword == "StackID" else _normalised(selection[keyword])
            if wanted not in counts:
                raise DataError(f"{path}: no frame with {keyword} {selection[keyword]!r}; it holds {_listing(counts)}")
            chosen = [k for k, value in zip(chosen, values) if value == wanted]
        elif len(counts) > 1:
            first = next(iter(counts))
            raise DataError(
                f"{path}: a multi-frame file of {len(per_frame)} frames holding {len(counts)} {what} "
                f"({keyword} {_listing(counts)}); the agent reads one 3-D volume per series. Export each as its own "
                f"series from the PACS, or choose one with frames={{{keyword!r}: {first!r}}} "
                "(read_dicom_series / DicomSeriesReader, docs/site-data.md)"
            )
    return chosen


def _listing(counts: Counter[str | float | None]) -> str:
    return ", ".join(f"{value}: {counts[value]} frames" for value in sorted(counts, key=str))
