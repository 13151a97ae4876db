"""What `site-agent check` learns about one dataset folder without knowing which job will read it: the data kind
(told by the folder's content), how many cases or images of each class it holds, and whether they read.

Listing is cheap and covers everything (case folders, CSV rows and their labels, file names); reading an item
decodes and validates it fully, through the same readers the jobs use. A quick inspection reads one item, a deep
one every item; both report every problem found, each naming the file and what to do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from fl_contract.classes import TRAINING_CLASSES
from site_agent.data.brats_case import (
    DATALIST_NAME,
    DEFAULT_DICOM_FOLDERS,
    LABEL_SUFFIX,
    MODALITIES,
    BratsCase,
    case_folders,
    discover_case,
    fitting_label_maps,
    label_values,
    read_case,
)
from site_agent.data.demo.linear_demo import FILE_NAME as LINEAR_FILE
from site_agent.data.demo.linear_demo import load_linear_site
from site_agent.data.isic import GROUND_TRUTH_CSV, IsicImageReader, scan_isic_site
from site_agent.data.readers.dicom_series import read_dicom_series
from site_agent.data.readers.nifti import NIFTI_SUFFIXES
from site_agent.data.readers.reader import DataError

AUTOENCODER_CONFIG = "config.json"
"""What marks a folder as a local autoencoder (diffusers' `save_pretrained` layout)."""
KNOWN_CONTENT = (
    f"an ISIC ground-truth CSV ({GROUND_TRUTH_CSV}), glioma case folders or {DATALIST_NAME}, {LINEAR_FILE}, "
    f"an autoencoder's {AUTOENCODER_CONFIG}"
)
"""What the folder of a dataset key may hold, for messages."""

Progress = Callable[[int, int], None]
"""Called with (items read, items to read) after each item."""


@dataclass(frozen=True)
class Item:
    """One case or image. `read` decodes and validates it as a job would, raising `DataError` if it cannot be
    used; it returns a note for the summary (e.g. which label maps fit), or None."""

    name: str
    read: Callable[[], str | None]


@dataclass
class Listing:
    """A folder's items of one data kind, and the problems found while listing them."""

    kind: str
    summary: str
    items: list[Item]
    problems: list[str] = field(default_factory=list)
    conclude: Callable[[Mapping[str, str]], tuple[str, list[str]]] | None = None
    """Turns the notes of the items read (by item name) into a summary and problems across items."""


@dataclass(frozen=True)
class Inspection:
    """What one folder holds (`kind`, `summary`), how many items read without a problem, and every problem found."""

    kind: str
    summary: str
    read: int
    problems: list[str]


def detect_kind(folder: Path) -> str | None:
    """The data kind the folder's content shows, or None when it shows none that the agent knows."""
    return next((name for name, (holds, _) in _KINDS.items() if holds(Path(folder))), None)


def inspect_folder(folder: Path, deep: bool = False, progress: Progress | None = None) -> Inspection | None:
    """List the folder's items, read the first one (`deep`: every one), and collect every problem found.

    None when the content shows no known data kind. A folder that cannot be listed at all (e.g. an unreadable
    ground-truth CSV) raises its `DataError`.
    """
    folder = Path(folder)
    kind = detect_kind(folder)
    if kind is None:
        return None
    listing = _KINDS[kind][1](folder)
    chosen = listing.items if deep else listing.items[:1]
    problems, notes = list(listing.problems), {}
    if not listing.items and not problems:
        problems.append(f"{folder}: holds no usable {listing.kind} cases or images")
    read_ok = 0
    for done, item in enumerate(chosen, start=1):
        try:
            note = item.read()
        except DataError as err:
            problems.append(str(err))
        else:
            read_ok += 1
            if note:
                notes[item.name] = note
        if progress is not None:
            progress(done, len(chosen))
    across, more = listing.conclude(notes) if listing.conclude else (", ".join(dict.fromkeys(notes.values())), [])
    summary = "; ".join(part for part in (listing.summary, _what_read(chosen, read_ok), across) if part)
    return Inspection(listing.kind, summary, read_ok, problems + more)


def _what_read(chosen: list[Item], read_ok: int) -> str:
    """"Site1_000 read", "all 3 read", "2 of 3 read": "read" only for the items that did read."""
    if not chosen:
        return ""
    if len(chosen) == 1:
        return f"{Path(chosen[0].name).name} {'read' if read_ok else 'did not read'}"
    return f"all {read_ok} read" if read_ok == len(chosen) else f"{read_ok} of {len(chosen)} read"


def _counts(counts: Mapping[str, int], order: tuple[str, ...]) -> str:
    """" (BCC 12, NV 3)": the non-zero counts in `order`."""
    listed = ", ".join(f"{name} {counts[name]}" for name in order if counts.get(name))
    return f" ({listed})" if listed else ""


def _holds_isic(folder: Path) -> bool:
    return (folder / GROUND_TRUTH_CSV).is_file()


def _list_isic(folder: Path) -> Listing:
    scan = scan_isic_site(folder, TRAINING_CLASSES)
    counts = Counter(record.diagnosis for record in scan.records)
    summary = f"{len(scan.records)} images" + _counts(counts, TRAINING_CLASSES)
    if scan.other_classes:
        summary += f", {sum(scan.other_classes.values())} rows of other classes ({dict(scan.other_classes)}) unused"
    problems = [f"{scan.csv}, line {p.line} ({p.image}): {p.reason}" for p in scan.problems]
    reader = IsicImageReader()
    items = [Item(str(record.path), partial(_read_photo, reader, record.path)) for record in scan.records]
    return Listing("ISIC 2019 dermoscopy", summary, items, problems)


def _read_photo(reader: IsicImageReader, path: Path) -> None:
    reader.read(path)


def _holds_linear(folder: Path) -> bool:
    return (folder / LINEAR_FILE).is_file()


def _list_linear(folder: Path) -> Listing:
    return Listing("linear demo", "", [Item(str(folder / LINEAR_FILE), partial(_read_linear, folder))])


def _read_linear(folder: Path) -> str:
    x, _ = load_linear_site(folder)
    return f"{x.shape[0]} samples of {x.shape[1]} features"


def _holds_glioma(folder: Path) -> bool:
    """A datalist, or a sub-folder laid out as a case (DICOM series folders, or BraTS-named NIfTI files)."""
    if (folder / DATALIST_NAME).is_file():
        return True
    names = tuple(f"_{m}{s}" for m in (*MODALITIES, LABEL_SUFFIX[1:]) for s in NIFTI_SUFFIXES)
    return any(
        any((case / series).is_dir() for series in DEFAULT_DICOM_FOLDERS.values())
        or any(p.name.endswith(names) for p in case.iterdir())
        for case in folder.iterdir()
        if case.is_dir()
    )


def _list_glioma(folder: Path) -> Listing:
    items, problems = [], []
    layouts: Counter[str] = Counter()
    unlabelled = 0
    for case_dir in case_folders(folder):
        try:
            case = discover_case(case_dir, require_labels=False)  # cases to segment (brats-inference) have none
        except DataError as err:
            problems.append(str(err))
            continue
        layouts["DICOM" if case.images[0].is_dir() else "NIfTI"] += 1
        unlabelled += case.label is None
        items.append(Item(str(case_dir), partial(_read_glioma_case, case)))
    summary = f"{len(items) - unlabelled} labelled cases" + (f", {unlabelled} without labels" if unlabelled else "")
    summary += _counts(layouts, ("DICOM", "NIfTI"))
    return Listing("glioma MRI", summary, items, problems, _agree_on_label_map)


def _read_glioma_case(case: BratsCase) -> str:
    """Reads the case as the segmentation job does, but accepting the labels of any known map: which map the
    job uses is its parameter, so the check reports which maps fit."""
    _, label = read_case(case, label_map=None)
    return " ".join(m.name for m in fitting_label_maps(label_values(label))) if label is not None else ""


def _agree_on_label_map(notes: Mapping[str, str]) -> tuple[str, list[str]]:
    """One label map must fit every case: a job reads all of a site's cases with the same map."""
    if not notes:
        return "", []
    common = set.intersection(*(set(note.split()) for note in notes.values()))
    if common:
        return f"labels fit {', '.join(sorted(common))}", []
    cases = "; ".join(f"{Path(case).name}: {note}" for case, note in notes.items())
    return "", [f"the cases' labels fit no single label map ({cases}); "
                "relabel the cases to one map (docs/site-data.md)"]


def _holds_autoencoder(folder: Path) -> bool:
    return (folder / AUTOENCODER_CONFIG).is_file()


def _list_autoencoder(folder: Path) -> Listing:
    return Listing("autoencoder", "", [Item(str(folder), partial(_load_autoencoder, folder))])


def _load_autoencoder(folder: Path) -> str:
    """Loads the model as FedKT-CSD does (diffusers is imported only here: it takes seconds)."""
    from fl_contract.models.dcae import load_autoencoder

    try:
        loaded = load_autoencoder(folder, "cpu")
    except Exception as err:  # diffusers raises OSError, ValueError, TypeError, ... for a folder it cannot build
        raise DataError(f"{folder}: the autoencoder does not load ({err})") from err
    return f"clip norm R = {loaded.clip_norm:g}"


def _holds_dicom_series(folder: Path) -> bool:
    """DICOM files directly in the folder (the "DICM" mark after the 128-byte preamble of the first few files)."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))[:5]
    for path in files:
        try:
            with path.open("rb") as stream:
                if stream.read(132)[128:] == b"DICM":
                    return True
        except OSError:
            continue
    return False


def _list_dicom_series(folder: Path) -> Listing:
    return Listing(SERIES_KIND, "", [Item(str(folder), partial(_read_dicom_series, folder))])


def _read_dicom_series(folder: Path) -> str:
    """Reads the series as a job reads each of a case's series."""
    image = read_dicom_series(folder)
    spacing = " x ".join(f"{s:.3g}" for s in _spacing(image.affine))
    return f"{' x '.join(str(n) for n in image.spatial_shape)} voxels of {spacing} mm"


def _spacing(affine: np.ndarray) -> list[float]:
    return [float(v) for v in np.linalg.norm(np.asarray(affine)[:3, :3], axis=0)]


SERIES_KIND = "one DICOM series"
"""The kind of a folder holding slices itself: readable, but not a dataset (jobs read case folders of series)."""
_KINDS: Mapping[str, tuple[Callable[[Path], bool], Callable[[Path], Listing]]] = {
    "isic": (_holds_isic, _list_isic),
    "linear": (_holds_linear, _list_linear),
    "glioma": (_holds_glioma, _list_glioma),
    "autoencoder": (_holds_autoencoder, _list_autoencoder),
    "dicom series": (_holds_dicom_series, _list_dicom_series),
}
"""Data kinds by what marks their folders, in the order tried; each with the function that lists its items."""
